"""The conformance kit itself, run against the CPU-backed test plugin."""

from __future__ import annotations

from lightning_accel.core.testing import AcceleratorConformance, FabricConformance


class TestTestaccConformance(AcceleratorConformance):
    accelerator = "testacc"
    single_strategy = "testacc_single"
    parallel_strategy = "testacc_ddp"
    memory_stat = "rss_bytes"  # testacc's tensors live in this process's host memory


class TestTestaccFabricConformance(FabricConformance):
    accelerator = "testacc"
    single_strategy = "testacc_single"
