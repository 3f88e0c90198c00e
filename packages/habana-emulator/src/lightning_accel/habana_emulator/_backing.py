"""How many emulated HPUs there are, taken from the core's emulation settings."""

from __future__ import annotations

from lightning_accel.core.emulation import emulation_settings

__all__ = ["emulated_device_count"]


def emulated_device_count() -> int:
    """How many HPUs the emulator reports (``LIGHTNING_ACCEL_EMULATED_DEVICES``)."""
    return emulation_settings().devices
