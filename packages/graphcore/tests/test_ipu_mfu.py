"""MFU on IPUs: Lightning's ThroughputMonitor divides by the IPU's published float16 peak, chosen by the accelerator.

The IPU strategy's root device is the host (poptorch takes host tensors), so the peak must come from the Trainer's
accelerator, not from the device Lightning passes.
"""

from __future__ import annotations

import pytest
from ipu_models import needs_cpu_float16
from lightning.pytorch.callbacks import ThroughputMonitor

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.testing.throughput import logged_fit
from lightning_accel.graphcore.peak_flops import ipu_generation

MK2_FP16 = 250 * 10**12  # IPU-M2000 datasheet: 1 petaFLOPS FP16.16 over 4 GC200 IPUs
BOW_FP16 = 350 * 10**12  # Bow-2000 datasheet: 1.4 petaFLOPS FP16.16 over 4 Bow IPUs


def _fit(precision: str) -> tuple[ThroughputMonitor, list[dict[str, float]]]:
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), window_size=2)
    return monitor, logged_fit("ipu", precision, [monitor])


@needs_cpu_float16
@pytest.mark.parametrize(("generation", "peak"), [(None, MK2_FP16), ("Bow", BOW_FP16)])
def test_throughput_monitor_reports_mfu_against_the_ipu_float16_peak(
    monkeypatch: pytest.MonkeyPatch, generation: str | None, peak: int
) -> None:
    if generation is None:
        monkeypatch.delenv("LIGHTNING_ACCEL_IPU_GENERATION", raising=False)
    else:
        monkeypatch.setenv("LIGHTNING_ACCEL_IPU_GENERATION", generation)
    monitor, logged = _fit("16-mixed")
    assert monitor.available_flops == peak
    with_mfu = [m for m in logged if "train/device/mfu" in m]
    assert with_mfu, logged
    for metrics in with_mfu:
        assert metrics["train/device/mfu"] == pytest.approx(metrics["train/device/flops_per_sec"] / peak)


def test_float32_has_no_published_peak_so_no_mfu() -> None:
    with pytest.warns(UserWarning, match=r"FLOPs not found for accelerator 'ipu' with torch.float32"):
        monitor, logged = _fit("32-true")
    assert monitor.available_flops is None
    assert not [m for m in logged if "train/device/mfu" in m]


def test_an_unknown_ipu_generation_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIGHTNING_ACCEL_IPU_GENERATION", "c600")
    with pytest.raises(ConfigurationError, match=r"LIGHTNING_ACCEL_IPU_GENERATION='c600' .*Accepted: bow, mk2"):
        ipu_generation()
