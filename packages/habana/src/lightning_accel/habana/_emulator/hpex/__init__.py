"""Emulation of ``habana_frameworks.torch.hpex`` (the SDK's extensions): Habana Mixed Precision."""

from . import hmp

__all__ = ["hmp"]
