"""The fp8 casts of the emulated Transformer Engine (Gaudi's ``torch.ops.hpu.cast_to_fp8_v2``), in torch's fp8 dtypes.

A cast multiplies by the tensor's scale, saturates at the format's largest value and rounds to ``float8_e4m3fn`` or
``float8_e5m2``: to nearest even (the SDK's ``CAST_ROUND_HALF_NE``), or stochastically (``CAST_ROUND_SR``) where the
recipe asks for it (gaudi-pytorch-bridge 1.19.0, ``hpu_ops/backend/fp8_ops.cpp``, ``GetCastParams``).

- E4M3: Gaudi2's e4m3 reaches 240 where torch's ``float8_e4m3fn`` reaches 448; both have 4 exponent bits with bias
  7 and 3 mantissa bits, so below 240 their values are the same numbers: saturating at the recipe's 240 and casting
  to ``float8_e4m3fn`` gives Gaudi2's values.
- Saturation: the cast kernel is in Gaudi's closed kernel library; the emulator saturates (as NVIDIA's Transformer
  Engine casts do), so a value beyond the range that delayed scaling expected becomes the largest value, not
  NaN or infinity.
- Stochastic rounding: the float32 bits below the fp8 mantissa get a uniform random addend before they are cut off,
  so a value rounds up with a probability equal to its distance from the lower neighbour (exact for normal
  numbers; fp8 subnormals are rounded to nearest).
"""

from __future__ import annotations

import torch

__all__ = ["dequantize", "quantize"]

# float32 has 23 mantissa bits; e4m3 keeps 3, e5m2 keeps 2.
_DROPPED_BITS = {torch.float8_e4m3fn: 20, torch.float8_e5m2: 21}


def _stochastic_round(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    dropped = _DROPPED_BITS[dtype]
    bits = values.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << dropped, bits.shape, dtype=torch.int32, device=bits.device)
    # Adding to the magnitude bits works for both signs (sign-magnitude); the mask then drops the low bits.
    rounded = ((bits + noise) & ~((1 << dropped) - 1)).view(torch.float32)
    return torch.where(torch.isfinite(values), rounded, values)


def quantize(
    tensor: torch.Tensor, scale: torch.Tensor, fp8_max: float, dtype: torch.dtype, stochastic: bool = False
) -> torch.Tensor:
    """``tensor * scale`` saturated at ``±fp8_max`` and rounded to the fp8 ``dtype``."""
    scaled = (tensor.float() * scale).clamp(-fp8_max, fp8_max)
    if stochastic:
        scaled = _stochastic_round(scaled, dtype).clamp(-fp8_max, fp8_max)
    return scaled.to(dtype)


def dequantize(tensor: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    """The float32 values an fp8 tensor stands for: ``tensor * scale_inv``."""
    return tensor.float() * scale_inv
