"""Emulation of ``transformer_engine.cpp_extensions.gemm``: the fp8 matrix product."""

from __future__ import annotations

import torch

__all__ = ["fp8_gemm"]


def fp8_gemm(
    A: torch.Tensor,
    A_scale_inv: torch.Tensor,
    B: torch.Tensor,
    B_scale_inv: torch.Tensor,
    out_dtype: torch.dtype,
    workspace: torch.Tensor | None = None,
    accumulate: bool = False,
    out: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    use_bias: bool = False,
    use_split_accumulator: bool = False,
    transa: bool = True,
    transb: bool = False,
) -> torch.Tensor:
    """``op(B) @ op(A)`` of the scaled fp8 operands (NVIDIA's argument order, as the SDK keeps it), in ``out_dtype``."""
    assert not use_split_accumulator
    if out is None:
        return torch.ops.hpu.fp8_gemm_v2(
            B, transb, A, transa, None, out_dtype, B_scale_inv, A_scale_inv, bias if use_bias else None, accumulate
        )
    torch.ops.hpu.fp8_gemm(
        B, transb, A, transa, out, out_dtype, B_scale_inv, A_scale_inv, bias if use_bias else None, accumulate, out
    )
    return out
