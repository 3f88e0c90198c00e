"""What the pre-flight run watches during each training step: :class:`PreflightCallback`.

It reads what the Gaudi SDK itself reports (the ``cpu_fallback`` and ``graph_compilation`` metrics of
``habana_frameworks.torch.hpu.metrics``, reached through :mod:`lightning_accel.habana.sdk`), Dynamo's own records
(graph breaks, the guards that failed and made it recompile), and, outside ``torch.compile``, every operator the
step dispatches (a ``TorchDispatchMode``), to place each finding in the user's code and to see host copies, int64
values beyond int32 and float32 matrix products under bf16 autocast.

A dispatch mode would turn Dynamo off, so in compile mode the operators are not watched: the CPU fallbacks are still
counted by the SDK, and their call sites come from the lazy run when both modes ran.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils._python_dispatch import TorchDispatchMode
from typing_extensions import override

from .. import sdk
from .report import Finding, Report

__all__ = ["MODES", "PreflightCallback"]

#: The execution modes a report can name: lazy mode, eager mode with ``torch.compile(backend="hpu_backend")`` (the
#: pre-flight run's two), and plain eager mode (a Trainer the callback watches without compiling).
MODES = ("lazy", "compile", "eager")

_INT32_MAX = 2**31 - 1
_HOST_SCALAR = "aten::_local_scalar_dense"
_COPIES = ("aten::_to_copy", "aten::copy_", "aten::to")
# Integer arithmetic whose int64 results can leave int32's range (indexing, comparisons and copies cannot).
_INT_ARITHMETIC = frozenset(
    {
        "aten::add",
        "aten::sub",
        "aten::mul",
        "aten::pow",
        "aten::sum",
        "aten::prod",
        "aten::cumsum",
        "aten::cumprod",
        "aten::add_",
        "aten::mul_",
        "aten::sub_",
        "aten::bitwise_left_shift",
        "aten::__lshift__",
    }
)
# Operators whose float32 inputs under bf16 autocast mean a float32 matrix engine pass (the costly ones).
_MATMULS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::convolution",
        "aten::_convolution",
        "aten::_scaled_dot_product_attention_math",
        "aten::_scaled_dot_product_flash_attention",
    }
)
# Frames in these trees are the framework's, not the user's: the call site is the innermost frame outside them.
_STDLIB = os.path.dirname(os.path.dirname(logging.__file__))
_FRAMEWORK_PARTS = (
    f"{os.sep}torch{os.sep}",
    f"{os.sep}lightning{os.sep}",
    f"{os.sep}pytorch_lightning{os.sep}",
    f"{os.sep}lightning_fabric{os.sep}",
    f"{os.sep}torchmetrics{os.sep}",
    f"{os.sep}habana_frameworks{os.sep}",
    f"{os.sep}lightning_accel{os.sep}",
)


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<") or any(part in filename for part in _FRAMEWORK_PARTS):
        return False
    return not filename.startswith(_STDLIB)


def _call_site() -> str:
    """``file:line`` of the innermost user frame on the Python stack, or ``""`` (the backward pass has none)."""
    frame = sys._getframe(2)
    while frame is not None:
        if _is_user_file(frame.f_code.co_filename):
            return f"{_short(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return ""


def _short(filename: str) -> str:
    # Relative to the working directory when below it: reports stay readable and free of machine paths.
    try:
        relative = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if relative.startswith("..") else relative


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _to_host(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to("cpu", copy=True)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(item) for item in value)
    if isinstance(value, dict):
        return {key: _to_host(item) for key, item in value.items()}
    return value


class _OpWatcher(TorchDispatchMode):
    """Records each operator the step dispatches on the HPU, with its call site, and the hazards it shows."""

    def __init__(self, device_type: str, lazy: bool) -> None:
        super().__init__()
        self.device_type = device_type
        self.lazy = lazy
        self.sites: dict[str, Counter[str]] = {}
        self.host_syncs: Counter[tuple[str, str]] = Counter()
        self.overflows: Counter[tuple[str, str]] = Counter()
        self.float64: Counter[tuple[str, str]] = Counter()
        self.fp32_matmuls: Counter[tuple[str, str]] = Counter()
        self.overflow_values: dict[tuple[str, str], int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name
        # Lazy mode narrows int64 to int32 on the device, so an overflow shows only beside the same operator run
        # in int64 on the host (computed first: an in-place operator changes its input).
        exact = None
        if self.lazy and name in _INT_ARITHMETIC and any(t.dtype == torch.int64 for t in _tensors(args)):
            exact = func(*_to_host(args), **_to_host(kwargs or {}))
        out = func(*args, **(kwargs or {}))
        inputs = list(_tensors((args, kwargs or {})))
        on_hpu = [t for t in inputs if t.device.type == self.device_type]
        outputs = list(_tensors(out))
        if not on_hpu and not any(t.device.type == self.device_type for t in outputs):
            return out
        site = _call_site()
        self.sites.setdefault(name, Counter())[site] += 1
        if name == _HOST_SCALAR or (name in _COPIES and any(t.device.type == "cpu" for t in outputs)):
            self.host_syncs[(name, site)] += 1
        for tensor in outputs:
            if tensor.device.type != self.device_type:
                continue
            if tensor.dtype == torch.float64:
                self.float64[(name, site)] += 1
        if isinstance(exact, torch.Tensor) and exact.dtype == torch.int64 and exact.numel():
            largest = int(exact.abs().max())
            if largest > _INT32_MAX:
                self.overflows[(name, site)] += 1
                self.overflow_values[(name, site)] = max(largest, self.overflow_values.get((name, site), 0))
        if (
            name in _MATMULS
            and torch.is_autocast_enabled(self.device_type)
            and any(t.dtype == torch.float32 for t in on_hpu)
        ):
            self.fp32_matmuls[(name, site)] += 1
        return out


class _GraphBreakLog(logging.Handler):
    """Collects where each graph break is in user code, from Dynamo's ``graph_breaks`` log artifact."""

    _AT = re.compile(r"Graph break in user code at (\S+):(\d+)")
    _FRAME = re.compile(r'File "([^"]+)", line (\d+)')

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.sites: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        found = self._AT.search(message)
        if not found:
            return
        filename, line = found.groups()
        if not _is_user_file(filename):
            # Dynamo names the innermost traced frame, which may be torch's or Lightning's (self.log): the user's
            # line is the innermost user frame of the traceback it logs with it.
            frames = [f for f in self._FRAME.findall(message) if _is_user_file(f[0])]
            if not frames:
                return
            filename, line = frames[-1]
        self.sites.append((message, f"{_short(filename)}:{line}"))

    def site_of(self, reason: str) -> str:
        """Where the graph break with Dynamo's ``reason`` (a key of ``counters["graph_break"]``) is, or ``""``."""
        first = reason.splitlines()[0] if reason else ""
        return next((site for message, site in self.sites if first and first in message), "")


def _stat(metric: Any, key: str) -> Any:
    return dict(metric.stats()).get(key)


class PreflightCallback(Callback):
    """Watches the training steps of a run for what will cost on Gaudi, and builds a :class:`Report` from them.

    Add it to any Trainer on the HPU; after ``fit``, :attr:`report` holds the findings of the steps it watched. The
    ``lightning-accel preflight`` command and :func:`lightning_accel.habana.preflight.preflight` use it.

    Args:
        mode: The execution mode of this run: ``"lazy"``, ``"eager"``, or ``"compile"`` (eager mode with the step
            compiled by ``torch.compile``: the operators are then not watched, see the module's docstring); ``None``
            reads lazy or eager from the SDK.
        target: What the report names as checked (default: the model's class).
        max_steps: Watch at most this many training steps (the rest run unwatched).

    Example:
        >>> from lightning_accel.habana.preflight import PreflightCallback
        >>> callback = PreflightCallback(mode="lazy")
        >>> # trainer = Trainer(accelerator="hpu", callbacks=[callback], max_steps=3); trainer.fit(model)
        >>> # print(render(callback.report))
    """

    def __init__(self, mode: str | None = None, target: str | None = None, max_steps: int | None = None) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"PreflightCallback(mode={mode!r}): not a mode. Accepted: {', '.join(MODES)}, or None.")
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"PreflightCallback(max_steps={max_steps!r}): must be a positive int or None.")
        self.mode = mode
        self.target = target
        self.max_steps = max_steps
        self.report: Report | None = None
        self._watcher: _OpWatcher | None = None
        self._steps = 0
        self._compiled_per_step: list[int] = []
        self._shapes_per_step: list[list[tuple[int, ...]]] = []
        self._syncs_per_step: list[int] = []
        self._fallbacks: Counter[str] = Counter()
        self._graph_log = _GraphBreakLog()
        self._step_open = False
        self._memory: dict[str, int | str] | None = None

    # -- run -----------------------------------------------------------------------------------------------------
    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        import torch._dynamo.utils as dynamo_utils

        lazy = bool(sdk.core_module().is_lazy())
        if self.mode is None:
            self.mode = "lazy" if lazy else "eager"
        elif (self.mode == "lazy") != lazy:
            raise RuntimeError(
                f"PreflightCallback(mode={self.mode!r}) but the Habana SDK loaded in "
                f"{'lazy' if lazy else 'eager'} mode. Set PT_HPU_LAZY_MODE={int(self.mode == 'lazy')} before the SDK "
                "loads (before the first import of lightning_accel.habana's device code), or pass mode=None."
            )
        self._lazy = lazy
        self._device_type = sdk.device_type()
        metrics = sdk.metrics_module()
        self._compile_metric = metrics.metric_global("graph_compilation")
        self._fallback_metric = metrics.metric_global("cpu_fallback")
        dynamo_utils.counters["graph_break"].clear()
        failures: dict[Any, Any] = dynamo_utils.guard_failures  # a defaultdict of Dynamo's
        failures.clear()
        torch._logging.set_logs(graph_breaks=True)
        for name in ("torch.__graph_breaks", "torch._dynamo"):
            logging.getLogger(name).addHandler(self._graph_log)
        if self.target is None:
            self.target = type(pl_module).__qualname__

    def _watching(self) -> bool:
        return self.max_steps is None or self._steps < self.max_steps

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if not self._watching():
            return
        self._step_open = True
        self._shapes_per_step.append([tuple(t.shape) for t in _tensors(batch)])
        self._compiled_before = int(_stat(self._compile_metric, "TotalNumber") or 0)
        self._fallbacks_before = dict(_stat(self._fallback_metric, "FallbackOps") or {})
        self._syncs_before = sum((self._watcher.host_syncs if self._watcher else Counter()).values())
        memory = sdk.hpu_module()
        memory.synchronize()
        memory.reset_peak_memory_stats()
        self._batch_size = next((t.shape[0] for t in _tensors(batch) if t.dim()), 0)
        if self.mode != "compile":
            if self._watcher is None:
                self._watcher = _OpWatcher(self._device_type, lazy=self.mode == "lazy")
            self._watcher.__enter__()

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._step_open:
            return
        self._step_open = False
        if self._watcher is not None:
            self._watcher.__exit__(None, None, None)
            self._syncs_per_step.append(sum(self._watcher.host_syncs.values()) - self._syncs_before)
        self._steps += 1
        self._compiled_per_step.append(int(_stat(self._compile_metric, "TotalNumber") or 0) - self._compiled_before)
        after = dict(_stat(self._fallback_metric, "FallbackOps") or {})
        for op, count in after.items():
            self._fallbacks[op] += count - self._fallbacks_before.get(op, 0)
        # The last watched step's: from the second step on, the optimizer's state exists, as in every later step.
        self._memory = _memory_profile(trainer, pl_module, self._batch_size)

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        for name in ("torch.__graph_breaks", "torch._dynamo"):
            logging.getLogger(name).removeHandler(self._graph_log)
        torch._logging.set_logs()
        self.report = self._build(pl_module)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self._step_open and self._watcher is not None:
            self._watcher.__exit__(None, None, None)
            self._step_open = False

    # -- report --------------------------------------------------------------------------------------------------
    def _build(self, pl_module: LightningModule) -> Report:
        import torch._dynamo.utils as dynamo_utils

        mode = str(self.mode)
        report = Report(str(self.target), self._steps)
        facts: dict[str, Any] = {
            "emulated": sdk.is_emulated(),
            "steps": self._steps,
            "graphs compiled per step": self._compiled_per_step,
        }
        if self._syncs_per_step:
            facts["host syncs per step"] = self._syncs_per_step
        if self._memory is not None:
            facts["memory"] = self._memory
        report.modes[mode] = facts
        watcher = self._watcher
        step_site = _definition_site(pl_module)
        for op, count in sorted(self._fallbacks.items()):
            if count <= 0:
                continue
            sites = _sites_of(watcher, op)
            report.findings.append(
                Finding(
                    "cpu_fallback",
                    mode,
                    op,
                    sites[0] if sites else "",
                    "Gaudi has no HPU kernel for this operator: it runs on the host CPU, with copies from and to the "
                    "device around it; in lazy mode it also ends the graph there.",
                    _fallback_fix(op),
                    count,
                    {"call_sites": sites} if len(sites) > 1 else {},
                )
            )
        # The second step may build new graphs with the same shapes (the optimizer's state exists from then on):
        # warm-up, not a recompilation, unless its batch shapes are new too.
        shapes = self._shapes_per_step
        new_steps = [
            step
            for step, count in enumerate(self._compiled_per_step, 1)
            if count and step > 1 and (step > 2 or shapes[step - 1] not in shapes[: step - 1])
        ]
        later = [self._compiled_per_step[step - 1] for step in new_steps]
        if mode != "compile" and self._lazy and new_steps:
            new_shapes = "; ".join(
                f"step {step}: " + ", ".join(str(list(s)) for s in shapes[step - 1]) for step in new_steps[:4]
            )
            report.findings.append(
                Finding(
                    "recompilation",
                    mode,
                    f"{sum(later)} graph(s) compiled after the first step, with batch shapes {new_shapes}",
                    step_site,
                    "Each new input shape builds and compiles a new graph on Gaudi (seconds to minutes each), "
                    "and the graph cache grows with every shape.",
                    "Pad inputs to a few fixed lengths (buckets) in the collate function, or drop the last "
                    "incomplete batch (drop_last=True).",
                    sum(later),
                    {"batch_shapes_per_step": [[list(s) for s in step] for step in shapes]},
                )
            )
        failures: dict[Any, Any] = dynamo_utils.guard_failures
        for code, reasons in failures.items():
            if not reasons:
                continue
            where = f"{_short(code.co_filename)}:{code.co_firstlineno}"
            report.findings.append(
                Finding(
                    "recompilation",
                    mode,
                    f"{code.co_name} recompiled {len(reasons)} time(s): {reasons[-1].splitlines()[0]}",
                    where,
                    "hpu_backend compiles the function again for each guard that fails (a new shape, a new value): "
                    "each costs a compilation on Gaudi.",
                    "Pad inputs to fixed lengths (buckets), or mark the varying dimension dynamic "
                    "(torch._dynamo.mark_dynamic, or torch.compile(dynamic=True)).",
                    len(reasons),
                    {"reasons": [r.splitlines()[0] for r in reasons]},
                )
            )
        for reason, count in dynamo_utils.counters["graph_break"].items():
            where = self._graph_log.site_of(reason)
            report.findings.append(
                Finding(
                    "graph_break",
                    mode,
                    reason.splitlines()[0],
                    where,
                    "A graph break splits the compiled step in two graphs with Python between them: more launches, "
                    "less fusion, and often a host synchronisation.",
                    _graph_break_fix(reason),
                    count,
                )
            )
        if watcher is not None:
            for (op, site), count in sorted(watcher.host_syncs.items()):
                report.findings.append(
                    Finding(
                        "host_sync",
                        mode,
                        op,
                        site,
                        "The host waits for the device to finish the queued work and copies the value back: in lazy "
                        "mode it cuts the graph and stalls the pipeline every step.",
                        "Keep values on the device: pass tensors to self.log (Lightning reads them when it logs), "
                        "avoid .item()/.cpu()/print(tensor) in the step.",
                        count,
                        {"per_step": round(count / max(self._steps, 1), 2)},
                    )
                )
            for (op, site), count in sorted(watcher.overflows.items()):
                report.findings.append(
                    Finding(
                        "dtype",
                        mode,
                        f"{op} gives int64 values up to {watcher.overflow_values[(op, site)]}, beyond int32",
                        site,
                        "In lazy mode Gaudi computes int64 tensors as int32: these values overflow on the device.",
                        "Keep the values below 2**31 (scale or hash them on the host), or compute them on the CPU.",
                        count,
                    )
                )
            for (op, site), count in sorted(watcher.float64.items()):
                report.findings.append(
                    Finding(
                        "dtype",
                        mode,
                        f"{op} computes in float64",
                        site,
                        "Gaudi has no float64 arithmetic: it computes float64 as float32, with float32's precision.",
                        "Use float32 (or cast to float64 on the host where the precision is needed).",
                        count,
                    )
                )
            for (op, site), count in sorted(watcher.fp32_matmuls.items()):
                report.findings.append(
                    Finding(
                        "autocast_fp32",
                        mode,
                        f"{op} runs in float32 under bf16 autocast",
                        site,
                        "Gaudi's matrix engines run bfloat16 at several times float32's rate: this product misses it.",
                        "Let autocast cast it (do not call .float() on its inputs), or add the operator to the bf16 "
                        "list (LOWER_LIST / HPUPrecisionPlugin's operator lists).",
                        count,
                    )
                )
        return report


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(list(tensors)) if t.device.type != "meta")


def _memory_profile(trainer: Trainer, pl_module: LightningModule, batch_size: int) -> dict[str, int | str] | None:
    """The step's :class:`~.memory.MemoryProfile` as plain data, or ``None`` when the step had no batch dimension."""
    if batch_size < 1:
        return None
    memory = sdk.hpu_module()
    memory.synchronize()
    params = list(pl_module.parameters())
    state = [v for opt in trainer.optimizers for s in opt.state.values() for v in s.values()]
    # FSDP's units are its blocks: the elements of the model's largest ModuleList.
    lists = [m for m in pl_module.modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
    largest = max(lists, key=lambda m: _nbytes(m.parameters()), default=None)
    total = _nbytes(params)
    if largest is None:
        root, block = 0, total
    else:
        root = total - _nbytes(largest.parameters())
        block = max(_nbytes(m.parameters()) for m in largest)
    return {
        "parameters": total,
        "gradients": _nbytes(p for p in params if p.requires_grad),
        "optimizer_state": _nbytes(state),
        "peak": int(memory.max_memory_allocated()),
        "batch_size": int(batch_size),
        "parameter_count": sum(p.numel() for p in params),
        "root_parameters": root,
        "block_parameters": block,
        "largest_parameter": max((_nbytes([p]) for p in params), default=0),
        # The ZeRO predictions convert the states and the working memory to the dtype DeepSpeed will train in.
        "precision": str(trainer.precision),
    }


def _sites_of(watcher: _OpWatcher | None, op: str) -> list[str]:
    if watcher is None:
        return []
    base = op.split(".")[0]
    sites: Counter[str] = Counter()
    for name, counts in watcher.sites.items():
        if name == base or name == op:
            sites.update(counts)
    return [site for site, _ in sites.most_common() if site]


def _definition_site(pl_module: LightningModule) -> str:
    import inspect

    try:
        func = type(pl_module).training_step
        filename = inspect.getsourcefile(func) or ""
        line = inspect.getsourcelines(func)[1]
    except (OSError, TypeError):
        return ""
    return f"{_short(filename)}:{line}"


def _fallback_fix(op: str) -> str:
    fixes = {
        "aten::bincount": "Count on the device with a fixed size: one_hot(x, num_classes).sum(0) or "
        "zeros(n).scatter_add_(0, x, ones); or compute the counts once on the host, outside the step.",
        "aten::unique": "Compute it on the host outside the step, or replace it with a fixed-size computation.",
        "aten::_unique2": "Compute it on the host outside the step, or replace it with a fixed-size computation.",
        "aten::nonzero": "Use a mask multiply or torch.where with a fixed shape instead of indexing by nonzero.",
    }
    return fixes.get(
        op.split(".")[0],
        "Replace it with operators Gaudi has kernels for, or move it out of the step (to the data pipeline).",
    )


def _graph_break_fix(reason: str) -> str:
    if "Dynamic shape operator" in reason or "data dependent" in reason.lower():
        return (
            "The operator's output size depends on tensor values: compute it with a fixed size (one_hot().sum(0) "
            "instead of bincount, a mask instead of boolean indexing), or move it to the data pipeline."
        )
    return (
        "Keep host-side work (.item(), .cpu(), printing, Python conditions on tensor values) out of the compiled "
        "code; for a break inside Lightning (self.log), compile the model's forward only and log outside it."
    )
