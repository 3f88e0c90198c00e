"""Whether IPUs can be used in this process: real hardware, the emulator, or neither (and why).

Everything goes through the seam (:mod:`lightning_accel.graphcore.sdk`), so the answer always describes the poptorch
the seam hands out. Cheap: it imports poptorch only when poptorch is installed and emulation is off, and never torch
or Lightning otherwise.
"""

from __future__ import annotations

from lightning_accel.core.emulation import EMULATE_VAR, emulation_settings, emulator_installed
from lightning_accel.core.errors import DeviceUnavailableError
from lightning_accel.core.plugin import Availability

from . import sdk

__all__ = ["availability"]


def availability() -> Availability:
    """Report ``"emulated"`` (IPU emulation on), ``"hardware"`` (poptorch and IPUs found) or ``"unavailable"``."""
    if sdk.is_emulated():
        if not emulator_installed(sdk.SDK_PACKAGE):
            return Availability("unavailable", sdk.EMULATOR_MISSING)
        settings = emulation_settings()
        return Availability(
            "emulated",
            f"IPUs are emulated ({EMULATE_VAR} includes 'ipu'): {settings.devices} IPU(s) backed by "
            f"{settings.backend}.",
            devices=settings.devices,
        )
    if not sdk.real_poptorch_installed():
        return Availability(
            "unavailable",
            f"poptorch (from Graphcore's Poplar SDK) is not installed. Install it on an IPU system, or set "
            f"{EMULATE_VAR}=ipu to use the emulator.",
        )
    try:
        ipus = sdk.available_ipus()
    except DeviceUnavailableError as exc:
        return Availability("unavailable", str(exc))
    if ipus:
        return Availability("hardware", f"poptorch found {ipus} IPU(s).", devices=ipus)
    return Availability(
        "unavailable",
        "poptorch is installed but reports no IPU hardware (check `gc-info -l` and that the Poplar SDK is enabled), "
        f"or set {EMULATE_VAR}=ipu to use the emulator.",
    )
