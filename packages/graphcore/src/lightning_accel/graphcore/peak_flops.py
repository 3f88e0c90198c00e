"""Peak FLOPs of Graphcore IPUs, for the MFU that Lightning's ``ThroughputMonitor`` reports.

Graphcore publishes the AI compute of its IPU-Machines, four IPUs each, in "FP16.16" (float16 operands, float16
accumulation); per IPU:

=========  =================  =================================================================================
IPU         float16            source
=========  =================  =================================================================================
Mk2 GC200   250 TFLOPS         IPU-M2000 datasheet: "4x GC200 IPUs, 1 petaFLOPS FP16.16 AI Compute"
                               (docs.graphcore.ai, graphcore-ipu-m2000-datasheet, Overview)
Bow IPU     350 TFLOPS         Bow-2000 datasheet: "4x Bow IPUs, 1.4 petaFLOPS FP16.16 AI compute"
                               (docs.graphcore.ai, bow-2000-datasheet, Overview)
=========  =================  =================================================================================

Those datasheets give no float32 number, so no MFU is reported for ``precision="32-true"``. poptorch tells the
generation apart by architecture only (``poptorch.ipuHardwareVersion()`` is 2 on both: the Bow IPU is a Mk2 IPU
clocked higher), so the Mk2 peak is used unless ``LIGHTNING_ACCEL_IPU_GENERATION=bow`` says the IPUs are Bow IPUs.
The poptorch emulator is a Mk2 system (``ipuHardwareVersion()`` 2); on it the MFU shows the mechanism works, its
value only means something on an IPU.

Example:
    >>> import torch
    >>> IPU_PEAK_FLOPS["bow"][torch.float16]
    350000000000000
"""

from __future__ import annotations

import os

import torch

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = ["GENERATION_VAR", "IPU_PEAK_FLOPS", "ipu_generation", "peak_flops"]

GENERATION_VAR = "LIGHTNING_ACCEL_IPU_GENERATION"
_TERA = 10**12

IPU_PEAK_FLOPS: dict[str, dict[torch.dtype, int]] = {
    "mk2": {torch.float16: 250 * _TERA},
    "bow": {torch.float16: 350 * _TERA},
}


def ipu_generation() -> str | None:
    """``"bow"`` or ``"mk2"`` (``LIGHTNING_ACCEL_IPU_GENERATION``, else poptorch's hardware version 2), or ``None``.

    Raises:
        ConfigurationError: When ``LIGHTNING_ACCEL_IPU_GENERATION`` names no known generation.
    """
    chosen = os.environ.get(GENERATION_VAR, "").strip().lower()
    if chosen:
        if chosen not in IPU_PEAK_FLOPS:
            raise ConfigurationError(
                f"{GENERATION_VAR}={os.environ[GENERATION_VAR]!r} is not an IPU generation. Accepted: "
                f"{', '.join(sorted(IPU_PEAK_FLOPS))} (any case); unset it to take poptorch's hardware version (Mk2)."
            )
        return chosen
    return "mk2" if sdk.poptorch_module().ipuHardwareVersion() == 2 else None


def peak_flops(device: torch.device, dtype: torch.dtype | str) -> int | None:
    """Peak FLOPs per second of one IPU for ``dtype``; ``None`` where Graphcore publishes none.

    Args:
        device: The strategy's root device (the host: poptorch takes host tensors); not used.
        dtype: The compute dtype (``torch.float16`` for ``precision="16-mixed"``).
    """
    generation = ipu_generation()
    if generation is None or not isinstance(dtype, torch.dtype):
        return None
    return IPU_PEAK_FLOPS[generation].get(dtype)
