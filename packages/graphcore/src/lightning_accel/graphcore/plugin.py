"""The Graphcore plugin spec, read by lightning-accel-core through the ``lightning_accel.plugins`` entry point.

Cheap to import: it names classes by import path and imports neither torch, Lightning nor poptorch.
"""

from __future__ import annotations

from lightning_accel.core.plugin import AcceleratorSpec, PluginSpec, StrategySpec

__all__ = ["PLUGIN"]

PLUGIN = PluginSpec(
    name="graphcore",
    distribution="lightning-accel-graphcore",
    accelerators=(
        AcceleratorSpec(
            name="ipu",
            trainer="lightning_accel.graphcore.accelerator:IPUAccelerator",
            fabric=None,
            description="Graphcore IPU through poptorch (devices: 1 or a power of two)",
            single_strategy="ipu_strategy",
            parallel_strategy="ipu_strategy",
            peak_flops="lightning_accel.graphcore.peak_flops:peak_flops",
        ),
    ),
    strategies=(
        StrategySpec(
            "ipu_strategy",
            trainer="lightning_accel.graphcore.strategy:IPUStrategy",
            fabric=None,
            description="Compiles the LightningModule with poptorch; devices are data-parallel replicas",
        ),
    ),
    availability="lightning_accel.graphcore.availability:availability",
    emulates=("ipu",),
    precision={
        "32-true": "float32 weights and inputs (default)",
        "16-mixed": "float16 inputs; float32 weights unless the model is .half(); loss scaling from poptorch's options",
        "16-true": "float16 weights and inputs (the model is converted with .half())",
    },
    # The last poptorch pins torch 2.0.1, whose newest Lightning is 2.3.
    lightning=">=2.3,<2.7",
    selftest="lightning_accel.graphcore.selftest:CHECKS",
    # `lightning-accel preflight --device ipu`: what poptorch 3.4 refuses, and the memory per IPU, before renting one.
    preflight="lightning_accel.graphcore.preflight_cli:main",
)
