"""Emulation of ``habana_frameworks.torch.utils.library_loader``."""

from __future__ import annotations

from .. import _not_emulated

__all__ = ["is_habana_available"]


def is_habana_available() -> bool:
    """Always ``True``: the emulator is only handed out when emulation is switched on."""
    return True


_not_emulated.provide(globals(), "habana_frameworks.torch.utils.library_loader")
