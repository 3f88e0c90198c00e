"""The plugin declaration of lightning-accel-deepspeed-hpu (cheap to import: no torch, Lightning or DeepSpeed).

It registers the ``hpu_deepspeed*`` strategy names into the Trainer and into Fabric. The ``"hpu"`` accelerator itself
comes from lightning-accel-habana, so this plugin is usable exactly when that one is (Gaudi hardware, or its
emulator) and the ``deepspeed`` package is installed.
"""

from __future__ import annotations

import importlib.util
from types import MappingProxyType
from typing import Any

from lightning_accel.core.plugin import Availability, PluginSpec, StrategySpec, import_target

__all__ = ["PLUGIN", "STRATEGY_NAMES", "availability"]

_STRATEGY = "lightning_accel.deepspeed_hpu.strategy:HPUDeepSpeedStrategy"
_FABRIC_STRATEGY = "lightning_accel.deepspeed_hpu.fabric:HPUDeepSpeedStrategy"
_HABANA_PLUGIN = "lightning_accel.habana.plugin:PLUGIN"


def _strategy(name: str, description: str, **init_params: Any) -> StrategySpec:
    # The base name stands for Lightning's DeepSpeedStrategy in the Trainer and in Fabric alike, so
    # strategy="deepspeed_stage_3" with accelerator="hpu" is this strategy with stage=3 in both.
    replaces = "DeepSpeedStrategy" if name == "hpu_deepspeed" else ""
    return StrategySpec(
        name,
        _STRATEGY,
        _FABRIC_STRATEGY,
        description,
        MappingProxyType(init_params),
        accelerator="hpu",
        replaces=replaces,
    )


_STRATEGIES = (
    _strategy("hpu_deepspeed", "DeepSpeed on HPUs (ZeRO stage 2 unless a config says otherwise)"),
    _strategy("hpu_deepspeed_stage_1", "DeepSpeed ZeRO stage 1 on HPUs", stage=1),
    _strategy("hpu_deepspeed_stage_2", "DeepSpeed ZeRO stage 2 on HPUs", stage=2),
    _strategy(
        "hpu_deepspeed_stage_2_offload",
        "DeepSpeed ZeRO stage 2 on HPUs, optimizer offloaded to CPU",
        stage=2,
        offload_optimizer=True,
    ),
    _strategy("hpu_deepspeed_stage_3", "DeepSpeed ZeRO stage 3 on HPUs", stage=3),
    _strategy(
        "hpu_deepspeed_stage_3_offload",
        "DeepSpeed ZeRO stage 3 on HPUs, optimizer and parameters offloaded to CPU",
        stage=3,
        offload_optimizer=True,
        offload_parameters=True,
    ),
    _strategy(
        "hpu_deepspeed_stage_3_offload_nvme",
        "DeepSpeed ZeRO-Infinity on HPUs: optimizer and parameters offloaded to NVMe (needs DeepSpeed's async_io op)",
        stage=3,
        offload_optimizer=True,
        offload_parameters=True,
        remote_device="nvme",
        offload_params_device="nvme",
        offload_optimizer_device="nvme",
    ),
)

STRATEGY_NAMES = tuple(spec.name for spec in _STRATEGIES)


def availability() -> Availability:
    """Usable when HPUs are (on hardware or emulated) and ``deepspeed`` is importable (it is not imported)."""
    if importlib.util.find_spec("lightning_accel.habana") is None:
        return Availability(
            "unavailable",
            "lightning-accel-habana is not installed; it provides the 'hpu' accelerator DeepSpeed runs on. Install it "
            "with `pip install 'lightning-accel[deepspeed-hpu]'`.",
        )
    habana: PluginSpec = import_target(_HABANA_PLUGIN)
    hpus = habana.check_availability()
    if not hpus.usable:
        return Availability("unavailable", f"No HPU can be used: {hpus.reason}")
    if importlib.util.find_spec("deepspeed") is None:
        return Availability(
            "unavailable",
            "The 'deepspeed' package is not installed. Install it with `pip install 'lightning-accel[deepspeed-hpu]'` "
            "(upstream deepspeed>=0.16.1,<0.20), or Intel's Gaudi fork as its docs say "
            "(`pip install git+https://github.com/HabanaAI/DeepSpeed.git@<SDK version>`).",
        )
    return Availability(hpus.state, f"{hpus.reason} DeepSpeed ({deepspeed_flavour()}) is installed.", hpus.devices)


def deepspeed_flavour() -> str:
    """Which DeepSpeed is installed: ``"upstream"``, or Intel's Gaudi fork (its version carries ``+hpu.synapse``).

    The version itself is in ``lightning-accel env``. Example: ``"Intel's Gaudi fork, SDK 1.20.0"``.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("deepspeed")
    except PackageNotFoundError:
        return "version unknown"
    _, _, local = installed.partition("+")
    if local.startswith("hpu.synapse.v"):
        return f"Intel's Gaudi fork, SDK {local.removeprefix('hpu.synapse.v')}"
    return "upstream"


PLUGIN = PluginSpec(
    name="deepspeed_hpu",
    distribution="lightning-accel-deepspeed-hpu",
    accelerators=(),
    strategies=_STRATEGIES,
    availability="lightning_accel.deepspeed_hpu.plugin:availability",
    precision=MappingProxyType(
        {
            "bf16-mixed": "DeepSpeed bf16: bf16 weights and activations, fp32 master weights in the optimizer",
            "bf16-true": "bf16 weights, computation and optimizer",
            "32-true": "float32 weights and computation",
            "16-mixed": "DeepSpeed fp16 with loss scaling, where the device supports float16",
        }
    ),
    # Overrides private methods of Lightning 2.6's DeepSpeedStrategy (see lightning_accel.core.compat).
    lightning=">=2.6,<2.7",
    selftest="lightning_accel.deepspeed_hpu.selftest:CHECKS",
)
