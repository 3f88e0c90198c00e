"""MFU on IPUs: Lightning's ThroughputMonitor divides by the IPU's published float16 peak, chosen by the accelerator.

The IPU strategy's root device is the host (poptorch takes host tensors), so the peak must come from the Trainer's
accelerator, not from the device Lightning passes.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ipu_models import needs_cpu_float16
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.graphcore.peak_flops import ipu_generation

MK2_FP16 = 250 * 10**12  # IPU-M2000 datasheet: 1 petaFLOPS FP16.16 over 4 GC200 IPUs
BOW_FP16 = 350 * 10**12  # Bow-2000 datasheet: 1.4 petaFLOPS FP16.16 over 4 Bow IPUs


class MemoryLogger(Logger):
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


class Tiny(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 2)
        self.flops_per_batch = 10_000

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).float().sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(precision: str) -> tuple[ThroughputMonitor, MemoryLogger]:
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), window_size=2)
    logger = MemoryLogger()
    trainer = Trainer(
        accelerator="ipu",
        devices=1,
        precision=precision,  # type: ignore[arg-type]
        max_steps=5,
        log_every_n_steps=1,
        callbacks=[monitor],
        logger=logger,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(Tiny(), DataLoader(TensorDataset(torch.randn(40, 8)), batch_size=8))
    return monitor, logger


@needs_cpu_float16
@pytest.mark.parametrize(("generation", "peak"), [(None, MK2_FP16), ("Bow", BOW_FP16)])
def test_throughput_monitor_reports_mfu_against_the_ipu_float16_peak(
    monkeypatch: pytest.MonkeyPatch, generation: str | None, peak: int
) -> None:
    if generation is None:
        monkeypatch.delenv("LIGHTNING_ACCEL_IPU_GENERATION", raising=False)
    else:
        monkeypatch.setenv("LIGHTNING_ACCEL_IPU_GENERATION", generation)
    monitor, logger = _fit("16-mixed")
    assert monitor.available_flops == peak
    with_mfu = [m for m in logger.logged if "train/device/mfu" in m]
    assert with_mfu, logger.logged
    for metrics in with_mfu:
        assert metrics["train/device/mfu"] == pytest.approx(metrics["train/device/flops_per_sec"] / peak)


def test_float32_has_no_published_peak_so_no_mfu() -> None:
    with pytest.warns(UserWarning, match=r"FLOPs not found for accelerator 'ipu' with torch.float32"):
        monitor, logger = _fit("32-true")
    assert monitor.available_flops is None
    assert not [m for m in logger.logged if "train/device/mfu" in m]


def test_an_unknown_ipu_generation_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIGHTNING_ACCEL_IPU_GENERATION", "c600")
    with pytest.raises(ConfigurationError, match=r"LIGHTNING_ACCEL_IPU_GENERATION='c600' .*Accepted: bow, mk2"):
        ipu_generation()
