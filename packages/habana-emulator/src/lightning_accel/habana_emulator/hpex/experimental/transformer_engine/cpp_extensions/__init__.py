"""Emulation of ``transformer_engine.cpp_extensions``: the fp8 casts and product on the SDK's fp8 operators.

Source: gaudi-pytorch-bridge 1.18.0, ``hpex/experimental/transformer_engine/cpp_extensions/``. As on the SDK, the
functions call ``torch.ops.hpu.cast_to_fp8_v2``, ``cast_to_fp8_hybrid``, ``cast_from_fp8``, ``fp8_gemm_v2`` and
``fp8_gemm`` (emulated in ``lightning_accel.habana_emulator._fp8_ops``) and record the amax of what they cast in the
scaling group's history. ``fp8_gelu`` (the SDK's fused ``fp8_gelu_v2`` kernel) is not emulated.

Example:
    >>> from habana_frameworks.torch.hpex.experimental.transformer_engine import cpp_extensions as tex
    >>> out = tex.cast_to_fp8(x, meta, FP8FwdTensors.GEMM1_INPUT, torch.float8_e4m3fn)  # doctest: +SKIP
"""

from __future__ import annotations

from ._utils import _update_amax_history as _update_amax_history
from .activation import fp8_gelu
from .cast import cast_from_fp8, cast_to_fp8, cast_to_fp8_hybrid
from .gemm import fp8_gemm

__all__ = ["cast_from_fp8", "cast_to_fp8", "cast_to_fp8_hybrid", "fp8_gelu", "fp8_gemm"]
