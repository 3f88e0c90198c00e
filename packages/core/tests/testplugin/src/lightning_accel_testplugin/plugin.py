"""The plugin declaration (cheap: imports nothing heavy)."""

from __future__ import annotations

import os
from typing import Any

from lightning_accel.core import AcceleratorSpec, Availability, PluginSpec, StrategySpec


def availability() -> Availability:
    """Usable unless ``TESTACC_UNAVAILABLE=1``; emulated when ``LIGHTNING_ACCEL_EMULATE`` names ``testacc``."""
    if os.environ.get("TESTACC_UNAVAILABLE") == "1":
        return Availability("unavailable", "TESTACC_UNAVAILABLE=1 is set; unset it to use testacc.")
    return Availability("emulated", "testacc always runs on the CPU.", devices=1)  # as auto_device_count


# The test device's "published" peak FLOPs per second, by dtype name (its root device is the host, as an IPU's is).
PEAK_FLOPS = {"float32": 10**12, "bfloat16": 4 * 10**12}


def peak_flops(device: Any, dtype: Any) -> int | None:
    """The test device's peak for ``dtype`` (``None`` for a dtype it publishes nothing for)."""
    return PEAK_FLOPS.get(str(dtype).replace("torch.", ""))


PLUGIN = PluginSpec(
    name="testplugin",
    distribution="lightning-accel-testplugin",
    accelerators=(
        AcceleratorSpec(
            name="testacc",
            trainer="lightning_accel_testplugin.accelerator:TestAccelerator",
            fabric="lightning_accel_testplugin.fabric:TestFabricAccelerator",
            description="CPU-backed test accelerator",
            single_strategy="testacc_single",
            parallel_strategy="testacc_ddp",
            peak_flops="lightning_accel_testplugin.plugin:peak_flops",
        ),
    ),
    strategies=(
        StrategySpec(
            "testacc_single",
            "lightning_accel_testplugin.strategies:TestSingleStrategy",
            "lightning_accel_testplugin.fabric:TestFabricSingleStrategy",
            "single testacc device",
        ),
        StrategySpec(
            "testacc_ddp",
            "lightning_accel_testplugin.strategies:TestDDPStrategy",
            "lightning_accel_testplugin.fabric:TestFabricDDPStrategy",
            "DDP over gloo on testacc devices",
        ),
        StrategySpec(
            "testacc_ddp_find_unused_parameters_true",
            "lightning_accel_testplugin.strategies:TestDDPStrategy",
            None,
            "DDP over gloo, finding unused parameters",
            {"find_unused_parameters": True},
        ),
    ),
    availability="lightning_accel_testplugin.plugin:availability",
    emulates=("testacc",),
    precision={"32-true": "float32", "bf16-mixed": "CPU autocast in bfloat16"},
)
