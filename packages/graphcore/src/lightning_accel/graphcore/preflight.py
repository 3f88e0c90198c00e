"""The IPU part of the pre-flight report: what poptorch 3.4 will refuse in a model, and where, before renting an IPU.

:func:`ipu_preflight` runs the model's step twice:

- on the host CPU, watching each ATen operator it dispatches (a ``TorchDispatchMode``) to learn where each one is
  called in the user's code, and which int64/float64 values it makes: the IPU has neither, poptorch narrows them to
  int32/float32 inside the graph (a ``dtype == torch.int64`` test is ``False`` there, int32 arithmetic wraps);
- compiled by poptorch (``poptorch.inferenceModel(...).compile``, reached through :mod:`lightning_accel.graphcore.sdk`,
  so the real poptorch on a machine with the Poplar SDK, the emulator under ``LIGHTNING_ACCEL_EMULATE=ipu``), whose
  refusal is read: operators without a lowering (losses among them), data-dependent output shapes (``nonzero``,
  ``bincount`` without ``minlength``, ``unique``, boolean-mask indexing).

poptorch stops at its first refusal: a data-dependent shape stops the trace before the unsupported operators are
listed, so fixing one finding can reveal the next; run it again after each fix.

Example:
    >>> import torch
    >>> from lightning_accel.graphcore.preflight import ipu_preflight
    >>> # findings = ipu_preflight(model, torch.randn(4, 8))
    >>> # for f in findings: print(f.kind, f.what, f.where)
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["KINDS", "IPUFinding", "ipu_preflight"]

#: The kinds of IPU findings, with their titles.
KINDS = {
    "unsupported_op": "Operator poptorch 3.4 cannot lower",
    "loss": "Loss poptorch 3.4 cannot lower",
    "dynamic_shape": "Data-dependent output shape",
    "narrowing": "int64/float64 narrowed on the IPU",
    "not_compiled": "poptorch refused the model",
    "memory": "IPU memory (estimated without Poplar)",
    "pipeline_split": "Pipeline split suggestion",
}
_INT32_MAX = 2**31 - 1
_INT_ARITHMETIC = frozenset(
    {"aten::add", "aten::sub", "aten::mul", "aten::pow", "aten::sum", "aten::prod", "aten::cumsum", "aten::cumprod"}
)
_FRAMEWORK_PARTS = tuple(
    f"{os.sep}{name}{os.sep}"
    for name in ("torch", "lightning", "pytorch_lightning", "lightning_fabric", "lightning_accel", "poptorch")
)
_UNSUPPORTED = re.compile(r"Unsupported ops found in compiled model: \[([^\]]*)\]")
_NO_META = re.compile(r"Type inference failed for (\S+) because")


@dataclass
class IPUFinding:
    """One thing poptorch 3.4 or the IPU will do differently from the host.

    Attributes:
        kind: One of :data:`KINDS`.
        what: The operator (``aten::...``) or what was seen.
        where: ``file:line`` in the user's code, or ``""`` when unknown.
        why: Why it matters on the IPU.
        fix: How to avoid it.
        details: Extra facts (poptorch's message...).

    Example:
        >>> IPUFinding("loss", "aten::huber_loss", "model.py:9", "no lowering", "use smooth_l1_loss").kind
        'loss'
    """

    kind: str
    what: str
    where: str
    why: str
    fix: str
    details: dict[str, Any] = field(default_factory=dict)


def _user_site() -> str:
    frame: Any = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<") and not any(part in name for part in _FRAMEWORK_PARTS):
            if not name.startswith(os.path.dirname(os.__file__)):
                relative = os.path.relpath(name)
                return f"{name if relative.startswith('..') else relative}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


class _Sites(TorchDispatchMode):
    """Where each operator is called from, and the int64/float64 values the host makes that the IPU would narrow."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: dict[str, str] = {}
        self.bool_index_site = ""
        self.overflows: dict[tuple[str, str], int] = {}
        self.float64: dict[tuple[str, str], int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func._schema.name
        site = _user_site()
        if site:
            self.sites.setdefault(name, site)
        if name == "aten::index" and any(t.dtype == torch.bool for t in _tensors(args[1:])):
            self.bool_index_site = self.bool_index_site or site
        for tensor in _tensors(out):
            if tensor.dtype == torch.float64:
                self.float64[(name, site)] = self.float64.get((name, site), 0) + 1
            elif tensor.dtype == torch.int64 and name in _INT_ARITHMETIC and tensor.numel():
                largest = int(tensor.abs().max())
                if largest > _INT32_MAX:
                    self.overflows[(name, site)] = max(largest, self.overflows.get((name, site), 0))
        return out


class _TrainingStep(torch.nn.Module):
    """A LightningModule's ``training_step`` as the module poptorch compiles, ``self.log`` left out."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *batch: Any) -> Any:
        module: Any = self.module
        log = module.log
        module.log = lambda *args, **kwargs: None  # logging is the host's business, not the graph's
        try:
            out = module.training_step(list(batch), 0)
        finally:
            module.log = log
        return out["loss"] if isinstance(out, dict) else out


def _is_lightning(model: torch.nn.Module) -> bool:
    return any(cls.__name__ == "LightningModule" for cls in type(model).__mro__)


def _refusal_findings(error: BaseException, watched: _Sites) -> list[IPUFinding]:
    text = str(error)
    if isinstance(error, torch._subclasses.fake_tensor.DynamicOutputShapeException):
        return [
            IPUFinding(
                "dynamic_shape",
                "aten::index with a boolean mask",
                watched.bool_index_site or watched.sites.get("aten::index", ""),
                "The result's size depends on the mask's values: the IPU compiles static shapes only.",
                "Keep the shape: torch.where(mask, x, 0) or multiply by the mask, and divide sums by mask.sum().",
                {"poptorch": type(error).__name__},
            )
        ]
    found = _UNSUPPORTED.search(text)
    if found:
        findings = []
        for op in (name.strip() for name in found.group(1).split(",") if name.strip()):
            is_loss = "loss" in op
            findings.append(
                IPUFinding(
                    "loss" if is_loss else "unsupported_op",
                    op,
                    watched.sites.get(op, ""),
                    "poptorch 3.4 has no lowering for it to PopART: the model does not compile for the IPU.",
                    "Use a loss poptorch lowers (mse_loss, l1_loss, smooth_l1_loss, cross_entropy, nll_loss...) or "
                    "write it from supported operators (abs, where, pow, mean), wrapped in poptorch.identity_loss."
                    if is_loss
                    else "Write it from supported operators, or compute it on the host (before the model, in the "
                    "data pipeline, or in a poptorch.CPU block).",
                    {"poptorch": text},
                )
            )
        return findings
    op = ""
    fix = "Compute it with a fixed output size, or on the host (in the data pipeline)."
    if "aten::nonzero" in text:
        op = "aten::nonzero"
        fix = "Use a mask (torch.where(cond, x, 0)) instead of the indices of nonzero elements."
    elif "Bincount `minlength`" in text:
        op = "aten::bincount"
        fix = "Pass minlength= the number of bins (a constant): on the IPU it is also the maximum length."
    else:
        meta = _NO_META.search(text)
        if meta:
            op = meta.group(1)
            if "unique" in op:
                fix = "Compute unique values on the host, or use a fixed-size one_hot(x, n).sum(0) > 0 instead."
    if op:
        base = op.split(".")[0]
        return [
            IPUFinding(
                "dynamic_shape",
                op,
                watched.sites.get(op, watched.sites.get(base, "")),
                "Its output size depends on the tensor's values: the IPU compiles static shapes only.",
                fix,
                {"poptorch": text},
            )
        ]
    return [
        IPUFinding(
            "not_compiled",
            f"{type(error).__name__}: {text.splitlines()[0] if text else ''}",
            "",
            "poptorch refused to compile the model for a reason the report does not classify.",
            "Read poptorch's message in details; compile the model once with poptorch to see the full traceback.",
            {"poptorch": text},
        )
    ]


def _narrowing_findings(watched: _Sites) -> list[IPUFinding]:
    findings = [
        IPUFinding(
            "narrowing",
            f"{op} gives int64 values up to {value}, beyond int32",
            site,
            "The IPU has no int64: poptorch computes it as int32 inside the graph, where these values wrap.",
            "Keep the values below 2**31 (scale or hash them on the host), or compute them on the host.",
        )
        for (op, site), value in sorted(watched.overflows.items())
    ]
    findings += [
        IPUFinding(
            "narrowing",
            f"{op} computes in float64",
            site,
            "The IPU has no float64: poptorch computes it as float32, with float32's precision and range.",
            "Use float32, or move the float64 computation to the host.",
            {"count": count},
        )
        for (op, site), count in sorted(watched.float64.items())
    ]
    return findings


def ipu_preflight(
    model: torch.nn.Module,
    *inputs: Any,
    ipus: int = 1,
    optimizer: Any = "sgd",
    gradient_accumulation: int = 1,
    device: str = "gc200",
) -> list[IPUFinding]:
    """What poptorch 3.4 refuses in ``model`` called with ``inputs``, what the IPU narrows, and what does not fit.

    Args:
        model: A ``torch.nn.Module`` (its ``forward`` is checked), or a ``LightningModule`` (its ``training_step``
            is checked, with ``inputs`` as the batch's tensors).
        inputs: One micro-batch, on the host.
        ipus: With more than 1, a ``pipeline_split`` finding says where to put ``poptorch.BeginBlock`` over that
            many IPUs (see :func:`~lightning_accel.graphcore.preflight_memory.suggest_split`).
        optimizer: For the memory estimate: a name of ``OPTIMIZER_SLOTS`` (``"sgd"``, ``"adam"``...) or an
            optimizer object.
        gradient_accumulation: poptorch's ``Training.gradientAccumulation`` (checked, see ``ipu_memory``).
        device: The IPU whose memory is compared: ``"gc200"`` (Mk2, default), ``"bow"`` or ``"gc2"``.

    Returns:
        The findings: refusals, narrowings, then memory; ``[]`` when poptorch compiles the model, nothing is
        narrowed, every IPU fits and no split was asked.

    Raises:
        TypeError: When ``model`` is not a ``torch.nn.Module``.
        ValueError: For a bad ``ipus``, ``optimizer``, ``gradient_accumulation`` or ``device``, or a split asked
            of a model without enough sequential blocks.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"ipu_preflight(model={type(model).__name__}): expected a torch.nn.Module or LightningModule.")
    from . import preflight_memory
    from .sdk import poptorch_module

    # Bad memory arguments are the caller's mistake: refuse them before any run.
    preflight_memory._capacity(device)
    preflight_memory.optimizer_slots(optimizer)
    preflight_memory._check_accumulation(gradient_accumulation)
    if isinstance(ipus, bool) or not isinstance(ipus, int) or ipus < 1:
        raise ValueError(f"ipus={ipus!r}: must be a positive int (1: the model as annotated, or on one IPU).")

    step = _TrainingStep(model) if _is_lightning(model) else model
    watched = _Sites()
    with torch.no_grad(), watched:
        step(*inputs)
    poptorch = poptorch_module()
    compiled = poptorch.inferenceModel(step)
    findings: list[IPUFinding] = []
    try:
        compiled.compile(*inputs)
    except Exception as error:  # poptorch's refusal, whatever its class: it is what the report reads
        findings = _refusal_findings(error, watched)
    finally:
        if compiled.isAttachedToDevice():
            compiled.detachFromDevice()
    try:
        memory = preflight_memory.memory_findings(
            model, *inputs, ipus=ipus, optimizer=optimizer, gradient_accumulation=gradient_accumulation, device=device
        )
    except ValueError:
        raise  # the model cannot be split as asked (no block list, too few blocks): the caller's to fix
    except Exception as error:  # a host step that fails says nothing about the IPU's refusals above
        memory = [
            IPUFinding(
                "memory",
                f"not estimated: {type(error).__name__}: {error}",
                "",
                "The memory estimate runs one training step on the host, which failed.",
                "Make the model's step run on the CPU with this batch, then run the report again.",
            )
        ]
    return findings + _narrowing_findings(watched) + memory
