"""Emulation of ``transformer_engine.module``: the Transformer Engine layers (gaudi-pytorch-bridge 1.18.0)."""

from __future__ import annotations

from .attention import FusedAttention
from .linear import Linear

__all__ = ["FusedAttention", "Linear"]
