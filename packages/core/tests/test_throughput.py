"""MFU on a vendor accelerator through Lightning's ThroughputMonitor, and throughput after a warm-up.

The test plugin's accelerator ``testacc`` declares a peak-FLOPs function (1 TFLOPS in float32, 4 in bfloat16) and
runs on the host, as an IPU's strategy does: its MFU must come from the accelerator, not from the root device.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from lightning.pytorch.callbacks import ThroughputMonitor
from torch.utils.data import DataLoader

from lightning_accel.core.callbacks import ThroughputAfterWarmup
from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.testing.throughput import logged_fit
from lightning_accel.core.throughput import compute_dtype


@pytest.mark.parametrize(("precision", "peak"), [("32-true", 10**12), ("bf16-mixed", 4 * 10**12)])
def test_throughput_monitor_reports_mfu_against_the_vendor_peak(precision: str, peak: int) -> None:
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), window_size=2)
    logged = logged_fit("testacc", precision, [monitor])
    assert monitor.available_flops == peak
    with_mfu = [m for m in logged if "train/device/mfu" in m]
    assert with_mfu, logged
    for metrics in with_mfu:
        assert metrics["train/device/mfu"] == pytest.approx(metrics["train/device/flops_per_sec"] / peak)


def test_a_dtype_without_a_published_peak_gives_no_mfu_and_says_so() -> None:
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), window_size=2)
    with pytest.warns(UserWarning, match=r"FLOPs not found for accelerator 'testacc' with torch.float64"):
        logged = logged_fit("testacc", "64-true", [monitor])
    assert monitor.available_flops is None
    assert not [m for m in logged if "train/device/mfu" in m]


def test_other_accelerators_keep_lightnings_answer() -> None:
    # The host is the testacc device's root device too: only the accelerator tells them apart.
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), window_size=2)
    logged_fit("cpu", "32-true", [monitor])
    assert monitor.available_flops is None


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16), ("32-true", torch.float32), (32, torch.float32)],
)
def test_compute_dtype_of_a_precision_setting(precision: object, dtype: torch.dtype) -> None:
    assert compute_dtype(precision) is dtype


def test_throughput_after_warmup_leaves_the_first_batches_out() -> None:
    # Two big warm-up batches, then four small ones: only the small ones may count.
    batches = [(torch.randn(32, 8),)] * 2 + [(torch.randn(4, 8),)] * 4
    throughput = ThroughputAfterWarmup(
        warmup_steps=2, batch_size_fn=lambda batch: batch[0].size(0), length_fn=lambda batch: 10 * batch[0].size(0)
    )
    logged = logged_fit("cpu", "32-true", [throughput], loader=DataLoader(batches, batch_size=None))
    metrics = throughput.metrics
    assert set(metrics) == {"train_samples_per_second", "train_steps_per_second", "train_tokens_per_second"}
    # Per counted step: 4 samples of 10 tokens each (counting a warm-up batch would make these 13.3 and 133).
    assert metrics["train_samples_per_second"] / metrics["train_steps_per_second"] == pytest.approx(4)
    assert metrics["train_tokens_per_second"] / metrics["train_steps_per_second"] == pytest.approx(40)
    assert metrics in logged


def test_throughput_after_warmup_reports_nothing_for_a_run_within_the_warmup() -> None:
    throughput = ThroughputAfterWarmup(warmup_steps=6, batch_size_fn=lambda batch: batch[0].size(0))
    logged = logged_fit("cpu", "32-true", [throughput])
    assert throughput.metrics == {}
    assert not [m for m in logged if "train_samples_per_second" in m]


@pytest.mark.parametrize("warmup_steps", [-1, 1.5, True])
def test_throughput_after_warmup_refuses_a_bad_warmup(warmup_steps: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"ThroughputAfterWarmup\(warmup_steps={warmup_steps!r}\).*int >= 0"):
        ThroughputAfterWarmup(warmup_steps=warmup_steps, batch_size_fn=len)
