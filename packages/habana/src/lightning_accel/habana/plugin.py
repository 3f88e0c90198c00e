"""The plugin spec of lightning-accel-habana, read by the core through the ``lightning_accel.plugins`` entry point.

Cheap to import: it names classes by path and imports neither torch, Lightning nor the Habana SDK.
"""

from __future__ import annotations

from lightning_accel.core.plugin import AcceleratorSpec, PluginSpec, StrategySpec

__all__ = ["PLUGIN", "TRANSFORMER_ENGINE_HINT"]

_PKG = "lightning_accel.habana"

TRANSFORMER_ENGINE_HINT = (
    "NVIDIA's Transformer Engine does not run on HPUs (Lightning's plugin for it imports that CUDA library); Gaudi's "
    "fp8 training is the SDK's Transformer Engine (Gaudi2 and later): plugins=[HPUPrecisionPlugin('fp8')] with the "
    "Trainer, plugins=[HPUPrecision('fp8')] with Fabric (lightning_accel.habana and lightning_accel.habana.fabric). "
    "Or use precision='bf16-mixed'."
)

PLUGIN = PluginSpec(
    name="habana",
    distribution="lightning-accel-habana",
    accelerators=(
        AcceleratorSpec(
            name="hpu",
            trainer=f"{_PKG}.accelerator:HPUAccelerator",
            fabric=f"{_PKG}.fabric.accelerator:HPUAccelerator",
            description="Intel Gaudi (HPU) through the Habana SDK, or its emulator",
            single_strategy="hpu_single",
            parallel_strategy="hpu_parallel",
            peak_flops=f"{_PKG}.peak_flops:peak_flops",
            refused_precisions={
                "transformer-engine": TRANSFORMER_ENGINE_HINT,
                "transformer-engine-float16": TRANSFORMER_ENGINE_HINT,
            },
        ),
    ),
    strategies=(
        StrategySpec(
            name="hpu_single",
            trainer=f"{_PKG}.strategies.single:SingleHPUStrategy",
            fabric=f"{_PKG}.fabric.strategies:SingleHPUStrategy",
            description="One HPU in one process",
            replaces="SingleDeviceStrategy",
        ),
        StrategySpec(
            name="hpu_parallel",
            trainer=f"{_PKG}.strategies.parallel:HPUParallelStrategy",
            fabric=f"{_PKG}.fabric.strategies:HPUParallelStrategy",
            description="Distributed data parallel over HCCL, one process per HPU, multi-node",
            replaces="DDPStrategy",
        ),
        StrategySpec(
            name="hpu_ddp",
            trainer=f"{_PKG}.strategies.parallel:HPUParallelStrategy",
            fabric=f"{_PKG}.fabric.strategies:HPUParallelStrategy",
            description="Alias of hpu_parallel",
        ),
        StrategySpec(
            name="hpu_fast_ddp",
            trainer=f"{_PKG}.strategies.fast_ddp:HPUFastDDPStrategy",
            fabric=f"{_PKG}.fabric.fast_ddp:HPUFastDDPStrategy",
            description="optimum-habana's fast_ddp: one all-reduce of all gradients per update, no DDP wrapper",
        ),
        StrategySpec(
            name="hpu_fsdp",
            trainer=f"{_PKG}.strategies.fsdp:HPUFSDPStrategy",
            fabric=f"{_PKG}.fabric.fsdp:HPUFSDPStrategy",
            description="Fully Sharded Data Parallel (torch FSDP) over HCCL, one process per HPU, eager mode",
            replaces="FSDPStrategy",
        ),
        StrategySpec(
            name="hpu_model_parallel",
            trainer=f"{_PKG}.strategies.model_parallel:HPUModelParallelStrategy",
            fabric=f"{_PKG}.fabric.model_parallel:HPUModelParallelStrategy",
            description="FSDP2 and tensor parallelism on a 2-D device mesh over HCCL, one process per HPU, eager mode",
            replaces="ModelParallelStrategy",
        ),
    ),
    availability=f"{_PKG}.availability:availability",
    emulates=("hpu",),
    precision={
        "32-true": "float32 weights and computation",
        "32": "float32 weights and computation (alias of 32-true)",
        "bf16-mixed": "per-operator bfloat16/float32 casts from operator lists (HPUPrecisionPlugin), float32 weights",
        "bf16": "alias of bf16-mixed",
        "16-mixed": "per-operator float16/float32 casts (Gaudi2 and later), float32 weights",
        "16": "alias of 16-mixed",
        "bf16-true": "bfloat16 weights and computation",
    },
    # Built and tested on Lightning 2.6 (the SDK's torch is current, so no older Lightning is needed).
    lightning=">=2.6,<2.7",
    selftest=f"{_PKG}.selftest:CHECKS",
    # `lightning-accel preflight`: what a model meets on Gaudi (CPU fallbacks, recompilations...), before renting one.
    preflight=f"{_PKG}.preflight:main",
    # `lightning-accel env`: whether SDK, torch, Lightning, transformers and DeepSpeed form a validated stack.
    environment=f"{_PKG}.versions:environment",
)
