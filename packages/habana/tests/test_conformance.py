"""The core's conformance kit, on the HPU (emulated here; real Gaudi when present)."""

from lightning_accel.core.testing import AcceleratorConformance, FabricConformance


class TestHPUConformance(AcceleratorConformance):
    accelerator = "hpu"
    single_strategy = "hpu_single"
    parallel_strategy = "hpu_parallel"


class TestHPUFabricConformance(FabricConformance):
    accelerator = "hpu"
    single_strategy = "hpu_single"
