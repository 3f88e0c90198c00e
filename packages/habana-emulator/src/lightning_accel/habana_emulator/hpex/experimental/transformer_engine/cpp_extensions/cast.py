"""Emulation of ``transformer_engine.cpp_extensions.cast``: casts to and from fp8 with a scaling group's scale."""

from __future__ import annotations

from typing import Any

import torch

from ..utils import FP8BwdTensors, FP8FwdTensors, FP8TensorMeta
from ._utils import select_amax_and_exec

__all__ = ["FP8BwdTensors", "FP8FwdTensors", "FP8TensorMeta", "cast_from_fp8", "cast_to_fp8", "cast_to_fp8_hybrid"]


def cast_to_fp8(
    inp: torch.Tensor,
    fp8_meta_tensor: FP8TensorMeta,
    fp8_tensor: Any,
    otype: torch.dtype,
    stochastic_rounding: bool = False,
    measure_amax: bool = True,
) -> torch.Tensor:
    """``inp`` times the group's scale for ``fp8_tensor``, in fp8 ``otype``; records its amax when asked."""

    def operator() -> Any:
        return torch.ops.hpu.cast_to_fp8_v2(
            inp, fp8_meta_tensor.scale[fp8_tensor], stochastic_rounding, measure_amax, dtype=otype
        )

    (cast_out,) = select_amax_and_exec(operator, fp8_meta_tensor, fp8_tensor, measure_amax=measure_amax)
    return cast_out


def cast_to_fp8_hybrid(
    inp: torch.Tensor,
    e5m2_meta_tensor: FP8TensorMeta,
    e4m3_meta_tensor: FP8TensorMeta,
    fp8_tensor: Any,
    measure_amax: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``inp`` in E5M2 and in E4M3, each with its group's scale; records the amax in both groups when asked."""

    def operator() -> Any:
        return torch.ops.hpu.cast_to_fp8_hybrid(
            inp, e5m2_meta_tensor.scale[fp8_tensor], e4m3_meta_tensor.scale[fp8_tensor], False, measure_amax
        )

    out_e5m2, out_e4m3 = select_amax_and_exec(
        operator,
        fp8_meta_tensor=e5m2_meta_tensor,
        fp8_tensor=fp8_tensor,
        fp8_meta_tensor2=e4m3_meta_tensor,
        measure_amax=measure_amax,
    )
    return out_e5m2, out_e4m3


def cast_from_fp8(
    inp: torch.Tensor, fp8_meta_tensor: FP8TensorMeta, fp8_tensor: Any, otype: torch.dtype
) -> torch.Tensor:
    """The values an fp8 tensor stands for: ``inp`` times the group's ``scale_inv``, in ``otype``."""
    return torch.ops.hpu.cast_from_fp8(inp, fp8_meta_tensor.scale_inv[fp8_tensor], otype)
