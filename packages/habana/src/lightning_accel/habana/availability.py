"""Whether HPUs can be used in this process, decided without importing torch, Lightning or the SDK."""

from __future__ import annotations

import glob
import os

from lightning_accel.core.emulation import EMULATE_VAR, emulation_settings, emulator_installed
from lightning_accel.core.plugin import Availability

from . import sdk

__all__ = ["availability"]

# The Gaudi kernel driver exposes one character device per card (accel on recent drivers, hl on older ones).
_DEVICE_GLOBS = ("/dev/accel/accel[0-9]*", "/dev/hl[0-9]*")


def _hardware_device_count() -> int:
    found: set[str] = set()
    for pattern in _DEVICE_GLOBS:
        found.update(path for path in glob.glob(pattern) if not path.endswith("_controlD"))
        if found:
            break
    count = len(found)
    visible = os.environ.get("HABANA_VISIBLE_MODULES", "").strip()
    if visible:
        count = min(count, len([part for part in visible.split(",") if part.strip()]))
    return count


def availability() -> Availability:
    """Report whether HPUs are emulated, present on hardware, or unavailable (with the reason and the fix).

    ``emulated`` when ``LIGHTNING_ACCEL_EMULATE`` includes ``hpu``; ``hardware`` when the Habana SDK is installed and
    Gaudi devices are visible; otherwise ``unavailable``.
    """
    settings = emulation_settings()
    if settings.emulates("hpu") and not emulator_installed("habana_frameworks.torch"):
        return Availability(state="unavailable", reason=sdk.EMULATOR_MISSING, devices=0)
    if settings.emulates("hpu"):
        return Availability(
            state="emulated",
            reason=f"{EMULATE_VAR} includes hpu: the Habana SDK emulator provides {settings.devices} HPU(s) backed by "
            f"{settings.backend}.",
            devices=settings.devices,
        )
    sdk_installed = sdk.is_sdk_installed()
    devices = _hardware_device_count()
    if sdk_installed and devices:
        return Availability(
            state="hardware", reason=f"Habana SDK installed and {devices} Gaudi device(s) visible.", devices=devices
        )
    if sdk_installed:
        reason = (
            "The Habana SDK (habana_frameworks) is installed but no Gaudi device is visible (/dev/accel/accel*). Check "
            f"the driver and HABANA_VISIBLE_MODULES, or set {EMULATE_VAR}=hpu to use the emulator."
        )
    else:
        reason = (
            "The Habana SDK (habana-torch-plugin, import name habana_frameworks) is not installed. Install the Gaudi "
            f"software stack on a Gaudi machine, or set {EMULATE_VAR}=hpu to use the emulator."
        )
    return Availability(state="unavailable", reason=reason, devices=0)
