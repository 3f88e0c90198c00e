"""Training throughput without validation and checkpoint-saving time (optimum-habana's ``adjust_throughput``).

Lightning's ``ThroughputMonitor`` measures training time from the start of training, setting aside the validation
batches it sees; checkpoint saving (and what runs around validation, such as its epoch-end hooks) still counts as
training time. optimum-habana's ``adjust_throughput=True`` takes the whole of evaluation and saving out.
:class:`AdjustedThroughputMonitor` does the same: it pauses its training clock from the start to the end of each
validation run inside ``fit`` and around each ``trainer.save_checkpoint`` call, and reports with Lightning's
``Throughput`` (the same metrics as ``ThroughputMonitor``, prefixed ``train|``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch import Callback
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.throughput import compute_dtype

__all__ = ["AdjustedThroughputMonitor"]


class AdjustedThroughputMonitor(Callback):
    """Samples (and tokens) per second of training, leaving out validation and checkpoint-saving time.

    Args:
        batch_size_fn: The number of samples in a batch.
        length_fn: The number of items (tokens) in a batch, for ``items_per_sec``.
        adjust: Leave validation and checkpoint time out (``True``, optimum-habana's ``adjust_throughput=True``);
            ``False`` counts all time since training started.
        window_size: Batches over which the rates are computed (Lightning's ``Throughput``).
        clock: The clock, in seconds (``time.perf_counter``).

    Attributes:
        metrics: The last metrics computed (``train|time``, ``train|samples``, ``train|device|samples_per_sec``...).
        excluded: Seconds of validation and checkpoint saving left out so far.

    Raises:
        ConfigurationError: For a ``window_size`` below 2 or arguments that are not callables.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana.adjusted_throughput import AdjustedThroughputMonitor
        >>> monitor = AdjustedThroughputMonitor(batch_size_fn=lambda batch: batch[0].shape[0])
        >>> trainer = Trainer(accelerator="hpu", callbacks=[monitor])  # doctest: +SKIP
    """

    def __init__(
        self,
        batch_size_fn: Callable[[Any], int],
        length_fn: Callable[[Any], int] | None = None,
        *,
        adjust: bool = True,
        window_size: int = 100,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        for name, value in (("batch_size_fn", batch_size_fn), ("clock", clock)):
            if not callable(value):
                raise ConfigurationError(f"AdjustedThroughputMonitor({name}={value!r}) is not accepted: a callable.")
        if length_fn is not None and not callable(length_fn):
            raise ConfigurationError(f"AdjustedThroughputMonitor(length_fn={length_fn!r}): a callable or None.")
        if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size < 2:
            raise ConfigurationError(
                f"AdjustedThroughputMonitor(window_size={window_size!r}) is not accepted: an int of at least 2."
            )
        self.batch_size_fn = batch_size_fn
        self.length_fn = length_fn
        self.adjust = adjust
        self.window_size = window_size
        self.clock = clock
        self.metrics: dict[str, float] = {}
        self.excluded = 0.0
        self._throughput: Any = None
        self._t0 = 0.0
        self._paused_at: float | None = None
        self._counts = [0, 0, 0]  # batches, samples, lengths
        self._trainer: Any = None

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        from lightning.fabric.utilities.throughput import Throughput, get_available_flops

        dtype = compute_dtype(getattr(trainer.precision_plugin, "precision", None)) or torch.float32
        flops = get_available_flops(trainer.strategy.root_device, dtype)
        self._throughput = Throughput(
            available_flops=flops, world_size=trainer.world_size, window_size=self.window_size, separator="|"
        )
        if self.adjust:
            self._wrap_save(trainer)

    def _wrap_save(self, trainer: Any) -> None:
        original = trainer.save_checkpoint

        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            if self._paused_at is not None:  # inside validation: that time is left out already
                return original(*args, **kwargs)
            start = self.clock()
            try:
                return original(*args, **kwargs)
            finally:
                self.excluded += self.clock() - start

        # An instance attribute, removed at teardown: ModelCheckpoint and user code call trainer.save_checkpoint.
        trainer.save_checkpoint = save_checkpoint
        self._trainer = trainer

    @override
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._t0 = self.clock()
        self.excluded = 0.0
        self._counts = [0, 0, 0]
        self.metrics = {}

    @override
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._throughput is None:
            return
        elapsed = self.clock() - self._t0 - (self.excluded if self.adjust else 0.0)
        self._counts[0] += 1
        self._counts[1] += int(self.batch_size_fn(batch))
        if self.length_fn is not None:
            self._counts[2] += int(self.length_fn(batch))
        flops = getattr(pl_module, "flops_per_batch", None)
        self._throughput.update(
            time=elapsed,
            batches=self._counts[0],
            samples=self._counts[1],
            lengths=self._counts[2] if self.length_fn is not None else None,
            flops=flops,
        )
        self.metrics = {f"train|{key}": float(value) for key, value in self._throughput.compute().items()}
        pl_module.log_dict(self.metrics, on_step=True, on_epoch=False)

    @override
    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self.adjust and not trainer.sanity_checking and self._throughput is not None:
            self._paused_at = self.clock()

    @override
    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._paused_at is not None:
            self.excluded += self.clock() - self._paused_at
            self._paused_at = None

    @override
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._trainer is not None:
            vars(self._trainer).pop("save_checkpoint", None)
            self._trainer = None
        self._paused_at = None
