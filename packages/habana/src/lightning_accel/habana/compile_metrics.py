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
* recompile-limit fallbacks: a torch compilation record whose ``fail_reason`` says Dynamo hit its recompile limit
  (``torch._dynamo.config.recompile_limit``, 8 by default): from then on that function runs uncompiled, silently. It
  is counted, named (torch's record of it has no function name; the tracker takes it from the earlier records of the
  same frame) and warned about at once;
* recipe-cache hits and misses: the SDK's ``metric_global("recipe_cache")`` (``TotalHit``, ``TotalMiss``), each lookup
  of a compiled recipe. The SDK registers that metric only when it loads with ``PT_HPU_ENABLE_CACHE_METRICS=1``;
  without it the keys are left out and the tracker says so once.

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
        hit_limit: Dynamo refused to recompile (its recompile limit): the function runs uncompiled from then on.
        limit: For ``hit_limit``, the setting and its value (``torch._dynamo.config.recompile_limit=8``).
    """

    step: int
    function: str
    reason: str
    input_shapes: tuple[tuple[int, ...], ...]
    hit_limit: bool = False
    limit: str = ""

    def __str__(self) -> str:
        shapes = ", ".join(str(list(shape)) for shape in self.input_shapes) or "not recorded"
        if self.hit_limit:
            return (
                f"step {self.step}: {self.function} hit Dynamo's recompile limit ({self.limit}) and runs uncompiled "
                f"from now on; last guard that failed: {self.reason} (input shapes: {shapes})"
            )
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


def _stats(metric_name: str) -> dict[str, Any] | None:
    """The stats of an SDK global metric, or ``None`` when the SDK has not registered it."""
    metric = sdk.metrics_module().metric_global(metric_name)
    if metric is None:  # not registered in this SDK (the SDK returns None for an unknown name)
        return None
    return dict(metric.stats())


def _total(metric_name: str) -> tuple[int, dict[str, int]]:
    """``TotalNumber`` of an SDK global metric and its per-operator counts (``FallbackOps``) where it has them."""
    stats = _stats(metric_name) or {}
    return int(stats.get("TotalNumber", 0)), dict(stats.get("FallbackOps", {}))


def _recipe_cache() -> tuple[int, int] | None:
    """The SDK's recipe-cache hits and misses so far (``None``: not registered, ``PT_HPU_ENABLE_CACHE_METRICS``)."""
    stats = _stats("recipe_cache")
    return None if stats is None else (int(stats.get("TotalHit", 0)), int(stats.get("TotalMiss", 0)))


def _frame_id(record: Any) -> str:
    # compile_id reads "frame/attempt" ("0/2"): the frame part names the function across its recompilations.
    return str(record.compile_id or "").split("/")[0]


def _hit_the_limit(record: Any) -> bool:
    reason = str(record.fail_reason or "")
    return "recompile limit" in reason or "recompile_limit" in reason or "cache_size_limit" in reason


def _limit_of(reason: str) -> str:
    """The Dynamo setting whose limit ``reason`` names, with its value."""
    for name in ("accumulated_recompile_limit", "recompile_limit", "cache_size_limit"):
        value = getattr(torch._dynamo.config, name, None)
        if name in reason and value is not None:
            return f"torch._dynamo.config.{name}={value}"
    return f"torch._dynamo.config.recompile_limit={getattr(torch._dynamo.config, 'recompile_limit', '?')}"


class CompileMetricsTracker:
    """Counts compilations, recompilations, recompile-limit hits, CPU fallbacks and recipe-cache lookups per step.

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
        self._names: dict[str, str] = {}
        self._limit_warned: set[str] = set()
        self._told_no_recipe_cache = False
        self._steps = 0
        self._compiling_steps_after_warmup = 0
        self.reset()

    def reset(self) -> None:
        """Count from now on: totals start at zero (the warning state and recorded recompilations are kept)."""
        self._graphs_at_start, _ = _total("graph_compilation")
        self._fallbacks_at_start, self._fallback_ops_at_start = _total("cpu_fallback")
        self._graphs_seen, self._fallbacks_seen = self._graphs_at_start, self._fallbacks_at_start
        self._recompiles_total = 0
        self._limit_hits_total = 0
        self._recipe_cache_at_start = _recipe_cache()
        self._recipe_cache_seen = self._recipe_cache_at_start
        records = torch._dynamo.utils.get_compilation_metrics()
        self._remember_names(records)
        self._last_record = records[-1] if records else None

    def _remember_names(self, records: Any) -> None:
        for record in records:
            if record.co_name:
                self._names[_frame_id(record)] = str(record.co_name)

    def _name(self, record: Any) -> str:
        if record.co_name:
            return str(record.co_name)
        frame = _frame_id(record)
        return self._names.get(frame, f"the function of Dynamo frame {frame or '?'}")

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
        self._remember_names(new)
        return new

    def step(self, batch: Any = None) -> dict[str, float]:
        """Read the counters after a step; returns this step's counts and the totals, ready for ``log_dict``.

        Args:
            batch: The step's batch; the shapes of its tensors are recorded with each recompilation.

        Returns:
            ``{prefix}graph_compilations``, ``{prefix}recompilations``, ``{prefix}recompile_limit_hits``,
            ``{prefix}cpu_fallbacks`` (this step) and the same with ``_total`` (since the tracker started); with the
            SDK's recipe-cache metric on, ``{prefix}recipe_cache_hits`` and ``{prefix}recipe_cache_misses`` too.
        """
        graphs, _ = _total("graph_compilation")
        fallbacks, fallback_ops = _total("cpu_fallback")
        new_graphs, self._graphs_seen = graphs - self._graphs_seen, graphs
        new_fallbacks, self._fallbacks_seen = fallbacks - self._fallbacks_seen, fallbacks
        shapes = _shapes(batch)
        new_recompilations: list[Recompilation] = []
        limit_hits: list[Recompilation] = []
        for record in self._new_records():
            reason = str(record.recompile_reason or "not recorded")
            if _hit_the_limit(record):
                limit = _limit_of(str(record.fail_reason))
                limit_hits.append(Recompilation(self._steps, self._name(record), reason, shapes, True, limit))
            elif record.recompile_reason:
                new_recompilations.append(Recompilation(self._steps, self._name(record), reason, shapes))
        self.recompilations.extend(new_recompilations + limit_hits)
        self._recompiles_total += len(new_recompilations)
        self._limit_hits_total += len(limit_hits)
        for recompilation in new_recompilations:
            rank_zero_info(f"Dynamo recompilation at {recompilation}")
        self._warn_limit(limit_hits)
        self._check_growth(new_graphs, new_recompilations, new_fallbacks, fallback_ops)
        self._steps += 1
        p = self.prefix
        logged = {
            f"{p}graph_compilations": float(new_graphs),
            f"{p}recompilations": float(len(new_recompilations)),
            f"{p}recompile_limit_hits": float(len(limit_hits)),
            f"{p}cpu_fallbacks": float(new_fallbacks),
            f"{p}graph_compilations_total": float(graphs - self._graphs_at_start),
            f"{p}recompilations_total": float(self._recompiles_total),
            f"{p}recompile_limit_hits_total": float(self._limit_hits_total),
            f"{p}cpu_fallbacks_total": float(fallbacks - self._fallbacks_at_start),
        }
        logged.update(self._recipe_cache_counts())
        return logged

    def _recipe_cache_counts(self) -> dict[str, float]:
        counts = _recipe_cache()
        if counts is None or self._recipe_cache_at_start is None or self._recipe_cache_seen is None:
            if not self._told_no_recipe_cache:
                self._told_no_recipe_cache = True
                rank_zero_info(
                    "Recipe-cache hits and misses are not logged: the SDK registers its recipe_cache metric only when "
                    "it loads with PT_HPU_ENABLE_CACHE_METRICS=1. Set it before the process starts to log them."
                )
            return {}
        (hits, misses), (seen_hits, seen_misses) = counts, self._recipe_cache_seen
        start_hits, start_misses = self._recipe_cache_at_start
        self._recipe_cache_seen = counts
        p = self.prefix
        return {
            f"{p}recipe_cache_hits": float(hits - seen_hits),
            f"{p}recipe_cache_misses": float(misses - seen_misses),
            f"{p}recipe_cache_hits_total": float(hits - start_hits),
            f"{p}recipe_cache_misses_total": float(misses - start_misses),
        }

    def _warn_limit(self, limit_hits: list[Recompilation]) -> None:
        # At once, not after warm-up: from here on the function silently runs uncompiled for the rest of the run.
        for hit in limit_hits:
            if hit.function in self._limit_warned:
                continue
            self._limit_warned.add(hit.function)
            rank_zero_warn(
                f"Dynamo recompile limit: {hit}. Each later call of {hit.function} runs eagerly. Find why it "
                "recompiles (the guard above; TORCH_LOGS=recompiles lists them all) and remove the cause: pad batches "
                "to a few shapes, compile with dynamic=True, or for a transformers model under regional compile set "
                "config.use_cache=False; or raise the limit if the recompilations are expected.",
                category=UserWarning,
            )

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
    """Log compilations, recompilations (reason, input shapes), recompile-limit hits, CPU fallbacks, recipe cache.

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
                reason = record.reason
                if record.hit_limit:
                    reason = f"recompile limit hit ({record.limit}), runs uncompiled from now on; last guard: {reason}"
                writer.writerow([record.step, record.function, reason, [list(s) for s in record.input_shapes]])
        self._written += len(records)
