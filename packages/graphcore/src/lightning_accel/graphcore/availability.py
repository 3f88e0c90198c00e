"""Whether IPUs can be used in this process: real hardware, the emulator, or neither (and why).

Cheap: it imports poptorch only when poptorch is installed, and never torch or Lightning otherwise.
"""

from __future__ import annotations

import importlib
import importlib.util

from lightning_accel.core.emulation import EMULATE_VAR, emulation_settings
from lightning_accel.core.plugin import Availability

__all__ = ["availability"]


def _hardware_ipus() -> int:
    poptorch = importlib.import_module("poptorch")
    count, size = 0, 1
    while size <= 64 and poptorch.ipuHardwareIsAvailable(size):
        count, size = size, size * 2
    return count


def availability() -> Availability:
    """Report ``"hardware"`` (poptorch and IPUs found), ``"emulated"`` (IPU emulation on) or ``"unavailable"``."""
    if importlib.util.find_spec("poptorch") is not None:
        ipus = _hardware_ipus()
        if ipus:
            return Availability("hardware", f"poptorch found {ipus} IPU(s).", devices=ipus)
        if not emulation_settings().emulates("ipu"):
            return Availability(
                "unavailable",
                "poptorch is installed but reports no IPU hardware (check `gc-info -l` and that the Poplar SDK is "
                "enabled).",
            )
    settings = emulation_settings()
    if settings.emulates("ipu"):
        return Availability(
            "emulated",
            f"IPUs are emulated ({EMULATE_VAR} includes 'ipu'): {settings.devices} IPU(s) backed by "
            f"{settings.backend}.",
            devices=settings.devices,
        )
    return Availability(
        "unavailable",
        f"poptorch (from Graphcore's Poplar SDK) is not installed. Install it on an IPU system, or set "
        f"{EMULATE_VAR}=ipu to use the emulator.",
    )
