"""Emulation of ``habana_frameworks.torch.utils``."""

from . import experimental, internal, library_loader

__all__ = ["experimental", "internal", "library_loader"]
