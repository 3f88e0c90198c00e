"""Peak FLOPs of each Intel Gaudi generation, for the MFU that Lightning's ``ThroughputMonitor`` reports.

The numbers are Intel's published peaks per card (dense matrix engine, MME), in FLOPs per second:

=========  ================  =============  ============================================================
generation  bfloat16          fp8            source
=========  ================  =============  ============================================================
Gaudi       60 TFLOPS         (none)         Intel, "Intel Gaudi 3 AI Accelerator: Architected for Gen AI
                                             Training and Inference", Hot Chips 2024 (R. Kaplan), slide 2
Gaudi2      432 TFLOPS        (not used)     same slide
Gaudi3      1835 TFLOPS       1835 TFLOPS    same talk, slide 4 ("BF16 Matrix TFLOPs 1835", "FP8 Matrix
                                             TFLOPs 1835")
=========  ================  =============  ============================================================

float32 (and Gaudi2's fp8) have no number in that source, so no MFU is reported for them (Lightning's warning "FLOPs
not found ..." says so). The generation is the SDK's ``hpu.get_device_name()`` (``"GAUDI2"`` on a Gaudi2; the
emulator's ``"GAUDI2 (emulated)"`` stands for the generation ``LIGHTNING_ACCEL_EMULATE_HPU_TYPE`` names). On the
emulator the MFU is computed against the emulated generation's peak: the mechanism is tested there, the value only
means something on the card.

Example:
    >>> import torch
    >>> GAUDI_PEAK_FLOPS["GAUDI3"][torch.bfloat16]
    1835000000000000
"""

from __future__ import annotations

import torch

from . import sdk

__all__ = ["GAUDI_PEAK_FLOPS", "generation_of", "peak_flops"]

_TERA = 10**12

GAUDI_PEAK_FLOPS: dict[str, dict[torch.dtype, int]] = {
    "GAUDI": {torch.bfloat16: 60 * _TERA},
    "GAUDI2": {torch.bfloat16: 432 * _TERA},
    "GAUDI3": {
        torch.bfloat16: 1835 * _TERA,
        torch.float8_e4m3fn: 1835 * _TERA,
        torch.float8_e5m2: 1835 * _TERA,
    },
}


def generation_of(device_name: str) -> str | None:
    """The generation in ``device_name`` (``"GAUDI2"``, ``"GAUDI2 (emulated)"``, ...), or ``None`` if unknown."""
    token = device_name.strip().upper().split(" ")[0] if device_name.strip() else ""
    # Longest first: "GAUDI3" and "GAUDI2" start with "GAUDI".
    for generation in sorted(GAUDI_PEAK_FLOPS, key=len, reverse=True):
        if token.startswith(generation):
            return generation
    return None


def peak_flops(device: torch.device, dtype: torch.dtype | str) -> int | None:
    """Peak FLOPs per second of this process's Gaudi for ``dtype``; ``None`` where Intel publishes none.

    Args:
        device: The HPU (one process drives one card, so its name is the SDK's for the process).
        dtype: The compute dtype (``torch.bfloat16`` for ``precision="bf16-mixed"``).
    """
    generation = generation_of(str(sdk.hpu_module().get_device_name()))
    if generation is None or not isinstance(dtype, torch.dtype):
        return None
    return GAUDI_PEAK_FLOPS[generation].get(dtype)
