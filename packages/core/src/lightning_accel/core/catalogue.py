"""The names lightning-accel's own vendor distributions register, for errors when one is not installed.

The core knows nothing of how a vendor works, but it does know which sibling distribution provides which name, so
that ``Trainer(accelerator="hpu")`` without ``lightning-accel-habana`` says what to install instead of Lightning's
bare "invalid accelerator name".
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KnownName", "known_accelerator", "known_strategy"]


@dataclass(frozen=True)
class KnownName:
    """Where a name comes from.

    Attributes:
        distribution: The distribution that registers it.
        extra: The extra of the ``lightning-accel`` meta-distribution that installs it.
        plugin: The plugin name (as used by ``LIGHTNING_ACCEL_DISABLE``).
    """

    distribution: str
    extra: str
    plugin: str


_HABANA = KnownName("lightning-accel-habana", "habana", "habana")
_GRAPHCORE = KnownName("lightning-accel-graphcore", "graphcore", "graphcore")
_DEEPSPEED = KnownName("lightning-accel-deepspeed-hpu", "deepspeed-hpu", "deepspeed_hpu")

_ACCELERATORS = {"hpu": _HABANA, "ipu": _GRAPHCORE}
_STRATEGY_PREFIXES = (("hpu_deepspeed", _DEEPSPEED), ("hpu_", _HABANA), ("ipu_", _GRAPHCORE))


def known_accelerator(name: str) -> KnownName | None:
    """The distribution that registers accelerator ``name``, if it is one of ours."""
    return _ACCELERATORS.get(name)


def known_strategy(name: str) -> KnownName | None:
    """The distribution that registers strategy ``name``, if it is one of ours."""
    return next((known for prefix, known in _STRATEGY_PREFIXES if name.startswith(prefix)), None)
