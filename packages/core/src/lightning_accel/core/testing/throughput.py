"""A short Trainer run that keeps what it logs, for tests of throughput and MFU on any accelerator.

Example:
    .. code-block:: python

        from lightning.pytorch.callbacks import ThroughputMonitor

        from lightning_accel.core.testing.throughput import logged_fit

        monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), window_size=2)
        logged = logged_fit("hpu", "bf16-mixed", [monitor])
        assert any("train/device/mfu" in metrics for metrics in logged)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["FLOPS_PER_BATCH", "FlopsCountedModule", "MemoryLogger", "logged_fit"]

FLOPS_PER_BATCH = 10_000
"""What :class:`FlopsCountedModule` declares as ``flops_per_batch`` (the number ThroughputMonitor reads)."""


class MemoryLogger(Logger):
    """A logger that keeps every logged metric in :attr:`logged`, one dictionary per ``log_metrics`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[dict[str, float]] = []

    @property
    def name(self) -> str:
        return "memory"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.logged.append(dict(metrics))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


class FlopsCountedModule(LightningModule):
    """One linear layer on 8 features that declares :data:`FLOPS_PER_BATCH` for ThroughputMonitor's MFU."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 2)
        self.flops_per_batch = FLOPS_PER_BATCH

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        # float() so that the loss of a reduced-precision run is reduced in float32, as a user's loss would be.
        return self.net(batch[0]).float().sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def logged_fit(
    accelerator: str, precision: str, callbacks: Iterable[Callback], loader: Iterable[Any] | None = None
) -> list[dict[str, float]]:
    """Fit :class:`FlopsCountedModule` for 6 steps on one device, logging every step; return what was logged.

    Args:
        accelerator: The Trainer's ``accelerator``.
        precision: The Trainer's ``precision``.
        callbacks: The callbacks under test (a ThroughputMonitor, say).
        loader: The training batches, each a sequence whose first item has 8 features; by default 6 batches of 8
            random samples.
    """
    logger = MemoryLogger()
    trainer = Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,  # type: ignore[arg-type]
        max_steps=6,
        log_every_n_steps=1,
        callbacks=list(callbacks),
        logger=logger,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(FlopsCountedModule(), loader or DataLoader(TensorDataset(torch.randn(48, 8)), batch_size=8))
    return logger.logged
