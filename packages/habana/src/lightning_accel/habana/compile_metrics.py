"""Compile and fallback metrics per training step: graph compilations, Dynamo recompilations (why), CPU fallbacks.

Three sources, read after each step:

* graph compilations: the SDK's ``hpu.metrics.metric_global("graph_compilation")`` (``TotalNumber``), a Synapse graph
  compiled outside eager mode's per-operator recipes (on the emulator: each graph ``hpu_backend`` compiles, each
  HPU graph capture, and in lazy mode each graph between step marks that the process has not built before);
* Dynamo recompilations: torch's own compilation records (``torch._dynamo.utils.get_compilation_metrics()``), whose
  ``recompile_reason`` is the guard that failed, e.g. ``tensor 'x' size mismatch at index 0. expected 16, actual 8``;
  each record is kept with the shapes of the step's batch that caused it;
* CPU fallbacks: the SDK's ``metric_global("cpu_fallback")`` (``TotalNumber``, ``FallbackOps``), each call of an
  operator Gaudi has no kernel for, which runs on the host (``torch.bincount``, say).

:class:`CompileMetricsTracker` does the counting and is what a Fabric loop uses (``fabric.log_dict(tracker.step())``);
:class:`HPUCompileMetrics` is the Trainer callback, which logs the same numbers through ``LightningModule.log`` (so
through any logger) and writes each recompilation's reason to ``recompilations.csv`` in the trainer's ``log_dir``.
Both warn once when compilations keep happening after warm-up: a model that recompiles every few steps spends its
time compiling.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = ["CompileMetricsTracker", "HPUCompileMetrics", "Recompilation"]

_GROWTH_ADVICE = (
    "Each compilation stalls the step it happens in. Usual causes and fixes: batches of varying shape (pad them to "
    "a few fixed sizes, or drop_last=True for a smaller last batch), or a size that really varies (compile with "
    "dynamic=True, or torch._dynamo.mark_dynamic(tensor, dim) on the varying dimension); see each recompilation's "
    "reason in HPUCompileMetrics.recompilations (or CompileMetricsTracker.recompilations)."
)


@dataclasses.dataclass(frozen=True)
class Recompilation:
    """One Dynamo recompilation: the step it happened in, the function, why, and the shapes of that step's batch.

    Attributes:
        step: The tracker's step (0-based) in which Dynamo recompiled.
        function: The compiled function's name (``co_name``), e.g. ``forward``.
        reason: The guard that failed, as Dynamo words it: ``tensor 'x' size mismatch at index 0. expected 16,
            actual 8``.
        input_shapes: The shapes of the tensors of the step's batch (empty when the step was given no batch).
    """

    step: int
    function: str
    reason: str
    input_shapes: tuple[tuple[int, ...], ...]

    def __str__(self) -> str:
        shapes = ", ".join(str(list(shape)) for shape in self.input_shapes) or "not recorded"
        return f"step {self.step}: {self.function} recompiled: {self.reason} (input shapes: {shapes})"


def _check_int(owner: str, name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{owner}({name}={value!r}): accepted: an int >= {minimum}.")
    return value


def _checked_settings(owner: object, warmup_steps: Any, patience: Any, prefix: Any) -> tuple[int, int, str]:
    """The tracker's and the callback's arguments, checked (the error names ``owner``'s class)."""
    name = type(owner).__name__
    warmup = _check_int(name, "warmup_steps", warmup_steps, 0)
    patience = _check_int(name, "patience", patience, 1)
    if not isinstance(prefix, str):
        raise ConfigurationError(f"{name}(prefix={prefix!r}): accepted: a string (it may be empty).")
    return warmup, patience, prefix


def _shapes(batch: Any) -> tuple[tuple[int, ...], ...]:
    """The shapes of the tensors in ``batch`` (nested lists, tuples and dicts), in order."""
    if isinstance(batch, torch.Tensor):
        return (tuple(batch.shape),)
    if isinstance(batch, Mapping):
        return tuple(shape for value in batch.values() for shape in _shapes(value))
    if isinstance(batch, (list, tuple)):
        return tuple(shape for value in batch for shape in _shapes(value))
    return ()


def _total(metric_name: str) -> tuple[int, dict[str, int]]:
    """``TotalNumber`` of an SDK global metric and its per-operator counts (``FallbackOps``) where it has them."""
    metric = sdk.metrics_module().metric_global(metric_name)
    if metric is None:  # not registered in this SDK (the SDK returns None for an unknown name)
        return 0, {}
    stats = dict(metric.stats())
    return int(stats.get("TotalNumber", 0)), dict(stats.get("FallbackOps", {}))


class CompileMetricsTracker:
    """Counts graph compilations, Dynamo recompilations and CPU fallbacks between calls of :meth:`step`.

    Counting starts when the tracker is made; each :meth:`step` returns what happened since the last one, and the
    totals since the start. After ``warmup_steps`` steps, the first time compilations (graph compilations or Dynamo
    recompilations) have happened in ``patience`` more steps, it warns once (rank zero) with the reasons.

    Args:
        warmup_steps: Steps in which compiling is expected (the first step compiles; compiling from the second step
            compiles then). An int >= 0.
        patience: After warm-up, how many steps that compile make the warning. An int >= 1.
        prefix: Prepended to each key of :meth:`step`'s dict. A string.

    Example (Fabric)::

        tracker = CompileMetricsTracker(warmup_steps=2)
        for batch in loader:
            loss = step(model, batch)
            fabric.log_dict(tracker.step(batch))
    """

    def __init__(self, warmup_steps: int = 3, patience: int = 2, prefix: str = "compile/") -> None:
        self.warmup_steps, self.patience, self.prefix = _checked_settings(self, warmup_steps, patience, prefix)
        self.recompilations: list[Recompilation] = []
        self.warned = False
        self._steps = 0
        self._compiling_steps_after_warmup = 0
        self.reset()

    def reset(self) -> None:
        """Count from now on: totals start at zero (the warning state and recorded recompilations are kept)."""
        self._graphs_at_start, _ = _total("graph_compilation")
        self._fallbacks_at_start, self._fallback_ops_at_start = _total("cpu_fallback")
        self._graphs_seen, self._fallbacks_seen = self._graphs_at_start, self._fallbacks_at_start
        self._recompiles_total = 0
        records = torch._dynamo.utils.get_compilation_metrics()
        self._last_record = records[-1] if records else None

    def _new_records(self) -> list[Any]:
        # torch keeps the latest 64 records in a deque: the new ones follow the last one seen (all if it fell out).
        records = torch._dynamo.utils.get_compilation_metrics()
        for index in range(len(records) - 1, -1, -1):
            if records[index] is self._last_record:
                new = records[index + 1 :]
                break
        else:
            new = records
        if records:
            self._last_record = records[-1]
        return new

    def step(self, batch: Any = None) -> dict[str, float]:
        """Read the counters after a step; returns this step's counts and the totals, ready for ``log_dict``.

        Args:
            batch: The step's batch; the shapes of its tensors are recorded with each recompilation.

        Returns:
            ``{prefix}graph_compilations``, ``{prefix}recompilations``, ``{prefix}cpu_fallbacks`` (this step) and the
            same with ``_total`` (since the tracker started).
        """
        graphs, _ = _total("graph_compilation")
        fallbacks, fallback_ops = _total("cpu_fallback")
        new_graphs, self._graphs_seen = graphs - self._graphs_seen, graphs
        new_fallbacks, self._fallbacks_seen = fallbacks - self._fallbacks_seen, fallbacks
        shapes = _shapes(batch)
        new_recompilations = [
            Recompilation(self._steps, str(record.co_name or "?"), str(record.recompile_reason), shapes)
            for record in self._new_records()
            if record.recompile_reason
        ]
        self.recompilations.extend(new_recompilations)
        self._recompiles_total += len(new_recompilations)
        for recompilation in new_recompilations:
            rank_zero_info(f"Dynamo recompilation at {recompilation}")
        self._check_growth(new_graphs, new_recompilations, new_fallbacks, fallback_ops)
        self._steps += 1
        p = self.prefix
        return {
            f"{p}graph_compilations": float(new_graphs),
            f"{p}recompilations": float(len(new_recompilations)),
            f"{p}cpu_fallbacks": float(new_fallbacks),
            f"{p}graph_compilations_total": float(graphs - self._graphs_at_start),
            f"{p}recompilations_total": float(self._recompiles_total),
            f"{p}cpu_fallbacks_total": float(fallbacks - self._fallbacks_at_start),
        }

    def _check_growth(
        self, new_graphs: int, new_recompilations: list[Recompilation], new_fallbacks: int, ops: dict[str, int]
    ) -> None:
        if self.warned or self._steps < self.warmup_steps:
            return
        if new_graphs == 0 and not new_recompilations and new_fallbacks == 0:
            return
        self._compiling_steps_after_warmup += 1
        if self._compiling_steps_after_warmup < self.patience:
            return
        self.warned = True
        grown = []
        if new_graphs:
            grown.append(f"graph compilations (+{new_graphs} in step {self._steps})")
        if new_recompilations:
            grown.append(f"Dynamo recompilations (latest: {new_recompilations[-1]})")
        if new_fallbacks:
            grown.append(f"CPU fallbacks (+{new_fallbacks}; by operator so far: {ops})")
        rank_zero_warn(
            f"Compilation keeps happening after the warm-up of {self.warmup_steps} steps: "
            f"{'; '.join(grown)} ({self._compiling_steps_after_warmup} steps after warm-up have compiled). "
            + _GROWTH_ADVICE
            + (
                " CPU fallbacks run operators Gaudi has no kernel for on the host: replace those operators."
                if new_fallbacks
                else ""
            ),
            category=UserWarning,
        )


class HPUCompileMetrics(Callback):
    """Log graph compilations, Dynamo recompilations (with reason and input shapes) and CPU fallbacks per step.

    The numbers of :meth:`CompileMetricsTracker.step` are logged after each training batch with
    ``LightningModule.log`` (so every logger gets them, ``on_step`` only). Each recompilation is also reported with
    ``rank_zero_info``, kept in :attr:`recompilations` and written (rank zero) to ``recompilations.csv`` in the
    trainer's ``log_dir`` (``step, function, reason, input_shapes``) when the trainer has a logger with a
    directory. Warns once when compilations keep happening after ``warmup_steps`` steps.

    Args:
        warmup_steps: Training steps in which compiling is expected. An int >= 0.
        patience: After warm-up, how many steps that compile make the warning. An int >= 1.
        prefix: Prepended to each logged key. A string.

    Example::

        from lightning_accel.habana import HPUCompile, HPUCompileMetrics

        trainer = Trainer(accelerator="hpu", callbacks=[HPUCompile(), HPUCompileMetrics(warmup_steps=2)])
    """

    def __init__(self, warmup_steps: int = 3, patience: int = 2, prefix: str = "compile/") -> None:
        self.warmup_steps, self.patience, self.prefix = _checked_settings(self, warmup_steps, patience, prefix)
        self.tracker: CompileMetricsTracker | None = None
        self._csv: Path | None = None
        self._written = 0

    @property
    def recompilations(self) -> list[Recompilation]:
        """The Dynamo recompilations seen so far in ``fit``."""
        return [] if self.tracker is None else self.tracker.recompilations

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.tracker = CompileMetricsTracker(self.warmup_steps, self.patience, self.prefix)
        log_dir = trainer.log_dir if trainer.loggers else None
        self._csv = Path(log_dir) / "recompilations.csv" if log_dir else None
        self._written = 0

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        assert self.tracker is not None
        metrics = self.tracker.step(batch)
        pl_module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=1)
        if trainer.is_global_zero and self._csv is not None and len(self.recompilations) > self._written:
            self._write(self.recompilations[self._written :])

    def _write(self, records: list[Recompilation]) -> None:
        assert self._csv is not None
        new_file = not self._csv.exists()
        self._csv.parent.mkdir(parents=True, exist_ok=True)
        with self._csv.open("a", newline="") as handle:
            writer = csv.writer(handle)
            if new_file:
                writer.writerow(["step", "function", "reason", "input_shapes"])
            for record in records:
                writer.writerow([record.step, record.function, record.reason, [list(s) for s in record.input_shapes]])
        self._written += len(records)
