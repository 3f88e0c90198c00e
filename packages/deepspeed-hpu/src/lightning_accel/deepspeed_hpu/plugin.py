"""The plugin declaration of lightning-accel-deepspeed-hpu (cheap to import: no torch, Lightning or DeepSpeed).

The HPUDeepSpeedStrategy and its ``hpu_deepspeed*`` strategy names are not implemented yet; until they are, the
plugin registers nothing and ``lightning-accel list`` says so.
"""

from __future__ import annotations

from lightning_accel.core import Availability, PluginSpec

__all__ = ["PLUGIN", "availability"]


def availability() -> Availability:
    """Not usable yet: the strategy is still being built."""
    return Availability(
        "unavailable",
        "lightning-accel-deepspeed-hpu 0.1.0 declares no strategy yet: HPUDeepSpeedStrategy is not implemented.",
    )


PLUGIN = PluginSpec(
    name="deepspeed_hpu",
    distribution="lightning-accel-deepspeed-hpu",
    accelerators=(),
    strategies=(),
    availability="lightning_accel.deepspeed_hpu.plugin:availability",
)
