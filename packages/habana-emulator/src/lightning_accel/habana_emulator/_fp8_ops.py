"""The SDK's fp8 operators (``torch.ops.hpu.cast_to_fp8_v2``, ``cast_from_fp8``, ``fp8_gemm_v2``, ...) with fp8 numbers.

Intel Neural Compressor's fp8 inference on Gaudi (``neural_compressor.torch.algorithms.fp8_quant``) quantizes a model
with these three operators: ``cast_to_fp8_v2`` casts activations and weights to fp8, ``fp8_gemm_v2`` multiplies fp8
operands, ``cast_from_fp8`` casts back. The SDK registers them from its C++ library when it loads; the emulator
registers them, with the SDK's schemas (each overload: the tensor scale, ``.scalar`` a float, ``.scalar_list`` a list
of floats), when the emulated SDK loads. Sources (gaudi-pytorch-bridge 1.19.0):

- the schemas: ``habana_eager/eager_custom_op_register.cpp:2146-2171`` (eager mode) and
  ``habana_kernels/kernels_register.cpp:2429-2451`` (lazy mode), the same text; the Transformer Engine's
  ``cast_to_fp8_hybrid`` (both formats from one input, ``scripts/ops_list/custom_ops_list.csv:72``,
  ``hpu_ops/backend/cast_to_fp8_hybrid_gen.cpp``) and ``fp8_gemm`` (the product into ``out``,
  ``eager_custom_op_register.cpp:2165``) too;
- what each checks and returns: ``hpu_ops/backend/fp8_ops.cpp``. ``cast_to_fp8_v2`` takes float32, bfloat16 or an
  fp8 tensor of the output dtype (``:198-218``), checks that a tensor scale has as many elements as ``scale_shape``
  (``ValidateScaleShape``, ``:29-52``), reshapes it to ``scale_shape`` (``HandleScaleTensor``, ``:54-74``), rounds to
  nearest even, or stochastically with ``stochastic_rounding`` (``GetCastParams``, ``:106-119``), and returns the
  fp8 tensor and, with ``is_amax``, the input's absolute maximum as a 0-dim float32 tensor (else an empty one,
  ``CastToFp8V2OutputShape``, ``:166-174``); ``cast_from_fp8`` returns float32 or bfloat16 only (``:266-276``);
  ``fp8_gemm_v2`` computes ``op(A) @ op(B)`` (``op`` transposes the last two dimensions when ``trans_*``), adds
  ``bias`` and, with ``accumulate``, ``D`` (which must then be given, ``:450-455``), in ``out_dtype``.

The scale multiplies: ``cast_to_fp8_v2(x, s)`` is ``fp8(x * s)``, ``cast_from_fp8(y, s)`` is ``y * s`` and
``fp8_gemm_v2`` multiplies each operand by its ``*_scale_inv`` (the SDK's Transformer Engine passes its ``scale`` to
the cast and its ``scale_inv`` to the product, ``transformer_engine/cpp_extensions/cast.py`` and ``gemm.py`` at
1.18.0; INC passes its inverted scales, ``fp8_quant/_core/quant_dequant.py``).

The numerics, and where they are the emulator's own:

- a cast saturates at the largest value of the format on the emulated generation and rounds as torch's
  ``float8_e4m3fn`` / ``float8_e5m2`` do (to nearest even). E4M3 reaches 240 on Gaudi2 and 448 on Gaudi3 (INC's
  ``fp8_quant/_core/fp_utils.py``, ``get_fullscale``; the Transformer Engine's ``recipe.Format.E4M3``): both have 4
  exponent bits with bias 7 and 3 mantissa bits, so below 240 their values are the same numbers. E5M2 reaches 57344.
  The cast kernel itself is in Gaudi's closed kernel library: that it saturates rather than overflowing to NaN is
  the emulator's choice (INC's scales keep values within range, so calibrated models do not reach it);
- stochastic rounding adds a uniform random value to the float32 bits below the fp8 mantissa before cutting them off
  (exact for normal numbers);
- the product multiplies the exactly dequantized operands in float32 on the backing device and rounds once to
  ``out_dtype``: equal to an exact fp8 product up to float32 accumulation, not bit for bit Gaudi's MME, whose
  accumulation order and internal precision are not public.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _generation
from .hpex.experimental.transformer_engine._cast import _stochastic_round

__all__ = ["FP8_DTYPES", "fp8_max", "register"]

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)

_library: torch.library.Library | None = None

_CAST_TO = (
    "cast_to_fp8_v2{overload}(Tensor input, {scale}, bool stochastic_rounding=False, bool is_amax=False, "
    "ScalarType dtype=None, int[]? scale_shape=None) -> (Tensor, Tensor)"
)
_CAST_FROM = "cast_from_fp8{overload}(Tensor input, {scale}, ScalarType out_dtype, int[]? scale_shape=None) -> Tensor"
_GEMM = (
    "fp8_gemm_v2{overload}(Tensor A, bool trans_A, Tensor B, bool trans_B, Tensor? D, ScalarType out_dtype, "
    "{scales}, Tensor? bias=None, bool accumulate=False, int[]? B_scale_shape=None) -> Tensor"
)
# The Transformer Engine's casts to both formats at once, and the older product into a given output.
_CAST_TO_HYBRID = (
    "cast_to_fp8_hybrid(Tensor input, Tensor? scale_152=None, Tensor? scale_143=None, bool stochastic_rounding=False, "
    "bool is_amax=False) -> (Tensor, Tensor, Tensor)"
)
_GEMM_OUT = (
    "fp8_gemm(Tensor A, bool trans_A, Tensor B, bool trans_B, Tensor D, ScalarType out_dtype, Tensor? A_scale_inv, "
    "Tensor? B_scale_inv, Tensor? bias, bool accumulate, Tensor(a!) out) -> Tensor(a!)"
)
# The three overloads of each operator and how their scale arguments are declared.
_SCALES = {
    "": ("Tensor? scale=None", "Tensor? scale", "Tensor? A_scale_inv=None, Tensor? B_scale_inv=None"),
    ".scalar": ("float scale", "float scale", "float A_scale_inv, float B_scale_inv"),
    ".scalar_list": ("float[] scale", "float[] scale", "float[] A_scale_inv, float[] B_scale_inv"),
}


def fp8_max(dtype: torch.dtype) -> float:
    """The largest value a cast to ``dtype`` keeps on the emulated generation (E4M3: 240 on Gaudi2, 448 on Gaudi3)."""
    if dtype == torch.float8_e5m2:
        return float(torch.finfo(torch.float8_e5m2).max)
    if _generation.generation() == "gaudi3":
        return float(torch.finfo(torch.float8_e4m3fn).max)
    return 240.0


def _scale_tensor(scale: Any, like: torch.Tensor, scale_shape: list[int] | None, op: str) -> torch.Tensor | None:
    """A tensor, float or float list scale as a float32 tensor on ``like``'s device, shaped by ``scale_shape``."""
    if scale is None:
        return None
    if isinstance(scale, torch.Tensor):
        values = scale.to(device=like.device, dtype=torch.float32)
    else:
        values = torch.tensor(scale, dtype=torch.float32).to(like.device)
    # A float scale is one number; tensors and lists are checked against scale_shape (ValidateScaleShape).
    if scale_shape is not None and not isinstance(scale, float):
        wanted = 1
        for size in scale_shape:
            wanted *= size
        if values.numel() != wanted:
            raise RuntimeError(
                f"{op}: Number of scale elements ({values.numel()}) is not equal to number of scale_shape elements "
                f"({wanted})."
            )
        if values.numel() > 1:
            values = values.reshape(scale_shape)
    return values


def _cast_to_fp8_v2(
    input: torch.Tensor,
    scale: Any = None,
    stochastic_rounding: bool = False,
    is_amax: bool = False,
    dtype: torch.dtype | None = None,
    scale_shape: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    source = input.dtype
    if source in FP8_DTYPES:
        if is_amax:
            raise RuntimeError("CastToFp8V2 must have no amax for float8.")
        if dtype != source:
            raise RuntimeError(
                f"CastToFp8V2 input and output must have the same dtype for float8, but are {source} and {dtype}"
            )
    elif source not in (torch.float32, torch.bfloat16):
        raise RuntimeError("CastToFp8V2 input dtype must be one of [float, bfloat16, float8_e5m2, float8_e4m3fn].")
    if dtype not in FP8_DTYPES:
        raise RuntimeError(f"CastToFp8V2 output dtype must be float8_e4m3fn or float8_e5m2, got {dtype}.")
    factor = _scale_tensor(scale, input, scale_shape, "CastToFp8V2")
    values = input.float() if factor is None else input.float() * factor
    limit = fp8_max(dtype)
    values = values.clamp(-limit, limit)
    if stochastic_rounding:
        values = _stochastic_round(values, dtype).clamp(-limit, limit)
    # The SDK allocates its outputs dense, whatever the input's strides (its Python wrapper's torch.empty(input.shape)
    # in transformer_engine's cpp_extensions): the same here, also for torch.compile, whose fake run of the operator
    # must give the strides the real run gives.
    casted = values.to(dtype).contiguous()
    if is_amax:
        amax = input.detach().abs().max().float()
    else:
        amax = input.new_empty((0,), dtype=torch.float32)
    return casted, amax


def _cast_from_fp8(
    input: torch.Tensor, scale: Any, out_dtype: torch.dtype, scale_shape: list[int] | None = None
) -> torch.Tensor:
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise RuntimeError("CastFromFp8 output dtype must be equal to float or bfloat16.")
    factor = _scale_tensor(scale, input, scale_shape, "CastFromFp8")
    values = input.float() if factor is None else input.float() * factor
    return values.to(out_dtype).contiguous()


def _operand(tensor: torch.Tensor, scale: Any, shape: list[int] | None, transpose: bool) -> torch.Tensor:
    factor = _scale_tensor(scale, tensor, shape, "Fp8GemmV2")
    values = tensor.float() if factor is None else tensor.float() * factor
    return values.transpose(-2, -1) if transpose else values


def _fp8_gemm_v2(
    A: torch.Tensor,
    trans_A: bool,
    B: torch.Tensor,
    trans_B: bool,
    D: torch.Tensor | None,
    out_dtype: torch.dtype,
    A_scale_inv: Any = None,
    B_scale_inv: Any = None,
    bias: torch.Tensor | None = None,
    accumulate: bool = False,
    B_scale_shape: list[int] | None = None,
) -> torch.Tensor:
    if accumulate and D is None:
        raise RuntimeError("Accumulation tensor must be provided at index 4 for Fp8GemmV2, when accumulate is true")
    out = _operand(A, A_scale_inv, None, trans_A) @ _operand(B, B_scale_inv, B_scale_shape, trans_B)
    if bias is not None:
        out = out + bias.float()
    if accumulate and D is not None:
        out = out + D.float()
    return out.to(out_dtype).contiguous()


def _cast_to_fp8_hybrid(
    input: torch.Tensor,
    scale_152: torch.Tensor | None = None,
    scale_143: torch.Tensor | None = None,
    stochastic_rounding: bool = False,
    is_amax: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if input.dtype not in (torch.float32, torch.bfloat16):
        raise RuntimeError("CastToFp8Hybrid input must be of float or bfloat16 dtype.")
    e5m2, amax = _cast_to_fp8_v2(input, scale_152, stochastic_rounding, is_amax, torch.float8_e5m2)
    e4m3, _ = _cast_to_fp8_v2(input, scale_143, stochastic_rounding, False, torch.float8_e4m3fn)
    return e5m2, e4m3, amax


def _fp8_gemm(
    A: torch.Tensor,
    trans_A: bool,
    B: torch.Tensor,
    trans_B: bool,
    D: torch.Tensor,
    out_dtype: torch.dtype,
    A_scale_inv: torch.Tensor | None,
    B_scale_inv: torch.Tensor | None,
    bias: torch.Tensor | None,
    accumulate: bool,
    out: torch.Tensor,
) -> torch.Tensor:
    result = _fp8_gemm_v2(A, trans_A, B, trans_B, D, out_dtype, A_scale_inv, B_scale_inv, bias, accumulate)
    return out.copy_(result)


def register() -> None:
    """Define the operators once per process (the SDK's library loads once too)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("hpu", "FRAGMENT")
    for overload, (cast_to, cast_from, gemm) in _SCALES.items():
        library.define(_CAST_TO.format(overload=overload, scale=cast_to))
        library.define(_CAST_FROM.format(overload=overload, scale=cast_from))
        library.define(_GEMM.format(overload=overload, scales=gemm))
        name = overload.lstrip(".")
        suffix = f".{name}" if name else ""
        library.impl(f"cast_to_fp8_v2{suffix}", _cast_to_fp8_v2, "CompositeExplicitAutograd")
        library.impl(f"cast_from_fp8{suffix}", _cast_from_fp8, "CompositeExplicitAutograd")
        library.impl(f"fp8_gemm_v2{suffix}", _fp8_gemm_v2, "CompositeExplicitAutograd")
    library.define(_CAST_TO_HYBRID)
    library.impl("cast_to_fp8_hybrid", _cast_to_fp8_hybrid, "CompositeExplicitAutograd")
    library.define(_GEMM_OUT)
    library.impl("fp8_gemm", _fp8_gemm, "CompositeExplicitAutograd")
    _library = library


# Loading the emulated SDK defines them, as the SDK's library does when it loads.
register()
