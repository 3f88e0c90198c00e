"""Stand-in for ``habana_frameworks.torch``: like the SDK, it exposes ``core`` and ``hpu``."""

from . import core, hpu

__all__ = ["core", "hpu"]
