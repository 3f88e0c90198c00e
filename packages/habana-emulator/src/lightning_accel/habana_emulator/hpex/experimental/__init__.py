"""Emulation of ``habana_frameworks.torch.hpex.experimental``: the SDK's Transformer Engine (``transformer_engine``)."""

from __future__ import annotations

__all__: list[str] = []
