"""MFU on Gaudi: Lightning's ThroughputMonitor (Trainer and Fabric) divides by the Gaudi generation's peak FLOPs."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _habana_helpers import script_env
from lightning.pytorch.callbacks import ThroughputMonitor

from lightning_accel.core.testing.throughput import logged_fit
from lightning_accel.habana.peak_flops import generation_of

GAUDI2_BF16 = 432 * 10**12  # Intel, Hot Chips 2024 (see lightning_accel.habana.peak_flops)


def _fit(precision: str) -> tuple[ThroughputMonitor, list[dict[str, float]]]:
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), window_size=2)
    return monitor, logged_fit("hpu", precision, [monitor])


@pytest.mark.emulator_only  # the emulator is a Gaudi2 by default; a real card may be another generation
def test_throughput_monitor_reports_mfu_against_the_gaudi2_bf16_peak() -> None:
    monitor, logged = _fit("bf16-mixed")
    assert monitor.available_flops == GAUDI2_BF16
    with_mfu = [m for m in logged if "train/device/mfu" in m]
    assert with_mfu, logged
    for metrics in with_mfu:
        assert metrics["train/device/mfu"] == pytest.approx(metrics["train/device/flops_per_sec"] / GAUDI2_BF16)


def test_float32_has_no_published_peak_so_no_mfu() -> None:
    with pytest.warns(UserWarning, match=r"FLOPs not found for accelerator 'hpu' with torch.float32"):
        monitor, logged = _fit("32-true")
    assert monitor.available_flops is None
    assert not [m for m in logged if "train/device/mfu" in m]


@pytest.mark.emulator_only
@pytest.mark.parametrize(
    ("generation", "expected"),
    # The emulated SDK (1.24) runs on Gaudi 2 and 3 only; Gaudi2 has no fp8 peak published.
    [("gaudi2", "432000000000000 None"), ("gaudi3", "1835000000000000 1835000000000000")],
)
def test_the_emulated_generation_decides_the_peak_for_fabric_too(generation: str, expected: str) -> None:
    # The SDK reads its generation once, when it loads: a fresh process per generation.
    code = (
        "import torch\n"
        "from lightning.fabric import Fabric\n"
        "from lightning.fabric.utilities.throughput import ThroughputMonitor, get_available_flops\n"
        "fabric = Fabric(accelerator='hpu', devices=1, precision='bf16-mixed')\n"
        "monitor = ThroughputMonitor(fabric)\n"
        "print('PEAKS', monitor.available_flops, get_available_flops(torch.device('hpu'), torch.float8_e4m3fn))\n"
    )
    env = script_env(LIGHTNING_ACCEL_EMULATE_HPU_TYPE=generation)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"PEAKS {expected}" in run.stdout


@pytest.mark.parametrize(
    ("device_name", "generation"),
    [("GAUDI", "GAUDI"), ("GAUDI2", "GAUDI2"), ("GAUDI2 (emulated)", "GAUDI2"), ("GAUDI3", "GAUDI3"), ("X", None)],
)
def test_generation_of_a_device_name(device_name: str, generation: str | None) -> None:
    assert generation_of(device_name) == generation
