"""Emulation of ``habana_frameworks.torch.utils.library_loader``."""

from __future__ import annotations

__all__ = ["is_habana_available"]


def is_habana_available() -> bool:
    """Always ``True``: the emulator is only handed out when emulation is switched on."""
    return True
