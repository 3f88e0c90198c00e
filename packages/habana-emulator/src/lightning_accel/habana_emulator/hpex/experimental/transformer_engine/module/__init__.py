"""Emulation of ``transformer_engine.module``: the Transformer Engine layers (gaudi-pytorch-bridge 1.18.0)."""

from __future__ import annotations

from .linear import Linear

__all__ = ["Linear"]


# The SDK's FusedAttention needs its fused fp8 attention kernel: the name is here and refuses when used.
from ....._not_emulated import provide as _provide

_provide(globals(), "habana_frameworks.torch.hpex.experimental.transformer_engine.module")
