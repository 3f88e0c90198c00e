"""Training throughput after a warm-up, as optimum-habana reports it.

The first steps of a run on an accelerator that compiles (Gaudi in lazy mode, IPUs, ``torch.compile``) include the
compilation, so a throughput averaged over the whole run understates the steady state. optimum-habana's trainer
ignores the first ``throughput_warmup_steps`` steps (``optimum/habana/transformers/training_args.py``, the argument;
``trainer.py``, ``start_time_after_warmup`` set when that many batches have run). :class:`ThroughputAfterWarmup`
does the same for any Lightning run.

It uses Lightning's public API only, so it works on every Lightning the core supports.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from lightning_accel.core.errors import ConfigurationError

__all__ = ["ThroughputAfterWarmup"]


class ThroughputAfterWarmup(Callback):
    """Samples (and tokens) per second of training, not counting the first ``warmup_steps`` batches.

    When training ends it logs, on rank 0 to every logger of the Trainer, and keeps in :attr:`metrics`:
    ``train_samples_per_second``, ``train_steps_per_second`` and, with ``length_fn``, ``train_tokens_per_second``,
    over all ranks (each rank's count times the world size, as the batches of data-parallel ranks have one size).
    The clock starts when the ``warmup_steps``-th batch has ended (after the device finished its work) and stops
    after the last one. A run of ``warmup_steps`` batches or fewer has no throughput to report: :attr:`metrics` stays
    empty.

    Args:
        warmup_steps: Training batches to leave out at the start (optimum-habana's ``throughput_warmup_steps``).
        batch_size_fn: The number of samples in a batch (e.g. ``lambda batch: batch[0].size(0)``).
        length_fn: The number of tokens in a batch, for ``train_tokens_per_second``; ``None`` for none.

    Raises:
        ConfigurationError: When ``warmup_steps`` is negative or not an int.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> throughput = ThroughputAfterWarmup(warmup_steps=3, batch_size_fn=lambda batch: batch[0].size(0))
        >>> trainer = Trainer(accelerator="hpu", callbacks=[throughput])  # doctest: +SKIP
        >>> trainer.fit(model)  # doctest: +SKIP
        >>> throughput.metrics["train_samples_per_second"]  # doctest: +SKIP
    """

    def __init__(
        self,
        warmup_steps: int,
        batch_size_fn: Callable[[Any], int],
        length_fn: Callable[[Any], int] | None = None,
    ) -> None:
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ConfigurationError(
                f"ThroughputAfterWarmup(warmup_steps={warmup_steps!r}) is not accepted. Accepted: an int >= 0, the "
                "number of training batches to leave out at the start (0 counts every batch)."
            )
        self.warmup_steps = warmup_steps
        self.batch_size_fn = batch_size_fn
        self.length_fn = length_fn
        self.metrics: dict[str, float] = {}
        self._seen_batches = 0
        self._counted_samples = 0
        self._counted_tokens = 0
        self._clock_from: float | None = None
        self._clock_to: float | None = None

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Reset the counts; with no warm-up the clock starts now."""
        self.metrics = {}
        self._seen_batches = self._counted_samples = self._counted_tokens = 0
        self._clock_from = self._clock_to = None
        if self.warmup_steps == 0:
            self._clock_from = self._now(trainer)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Count the batch once the warm-up is over; start the clock when it ends."""
        self._seen_batches += 1
        if self._seen_batches < self.warmup_steps:
            return
        if self._seen_batches == self.warmup_steps:
            self._clock_from = self._now(trainer)
            return
        self._counted_samples += int(self.batch_size_fn(batch))
        if self.length_fn is not None:
            self._counted_tokens += int(self.length_fn(batch))
        self._clock_to = self._now(trainer)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Compute and log the throughput of the batches after the warm-up."""
        if self._clock_from is None or self._clock_to is None or self._clock_to <= self._clock_from:
            return
        elapsed = self._clock_to - self._clock_from
        steps = self._seen_batches - self.warmup_steps
        world = trainer.world_size
        self.metrics = {
            "train_samples_per_second": self._counted_samples * world / elapsed,
            "train_steps_per_second": steps / elapsed,
        }
        if self.length_fn is not None:
            self.metrics["train_tokens_per_second"] = self._counted_tokens * world / elapsed
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(self.metrics, step=trainer.global_step)

    @staticmethod
    def _now(trainer: Trainer) -> float:
        # The device may still be working on the step (CUDA, an HPU in lazy mode): wait for it, as Lightning's
        # ThroughputMonitor does for CUDA, through the device's torch module (torch.cuda, torch.hpu, ...).
        device_module = getattr(torch, trainer.strategy.root_device.type, None)
        synchronize = getattr(device_module, "synchronize", None)
        if callable(synchronize):
            synchronize()
        return time.perf_counter()
