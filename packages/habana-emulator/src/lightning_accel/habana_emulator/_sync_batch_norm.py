"""The SDK's kernels for SyncBatchNorm on the emulated HPU.

torch's ``SyncBatchNorm`` computes per-device statistics, combines them across ranks and normalizes with five ATen
operators (``batch_norm_stats``, ``batch_norm_gather_stats_with_counts``, ``batch_norm_elemt``,
``batch_norm_backward_reduce``, ``batch_norm_backward_elemt``). The CPU has no kernel for them, and the Gaudi bridge
has HPU kernels for all five (gaudi-pytorch-bridge 1.19 ``scripts/hpu_op.yaml``). These kernels give the emulated HPU
the same operators, computed on host views of the HPU memory (no copy) in float32 for the reduced floating types, with
fresh results adopted as device memory, as the device's fallback does for every other operator.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _native

__all__ = ["register"]

_library: Any = None


def _per_channel(tensor: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``tensor`` of shape (C,) shaped to broadcast along dimension 1 of ``like``."""
    return tensor.reshape([1, -1] + [1] * (like.dim() - 2))


def _reduced_dims(tensor: torch.Tensor) -> list[int]:
    return [d for d in range(tensor.dim()) if d != 1]


def _acc(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor


def _host(tensor: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensor is None else _native.backing_alias(tensor)


def _device(tensor: torch.Tensor) -> Any:
    return _native.adopt(tensor.contiguous())


def _stats(input: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = _acc(_native.backing_alias(input))
    dims = _reduced_dims(x)
    mean = x.mean(dims)
    var = x.var(dims, unbiased=False)
    return _device(mean), _device((var + eps).rsqrt())


def _gather_stats_with_counts(
    input: torch.Tensor,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    momentum: float,
    eps: float,
    counts: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    means, invstds = _native.backing_alias(mean).double(), _native.backing_alias(invstd).double()
    weights = _native.backing_alias(counts).double().reshape(-1, 1)
    total = weights.sum()
    global_mean = (weights * means).sum(0) / total
    variances = invstds.pow(-2) - eps
    global_var = (weights * (variances + means.pow(2))).sum(0) / total - global_mean.pow(2)
    if running_mean is not None:
        host = _native.backing_alias(running_mean)
        host.copy_(host * (1 - momentum) + global_mean.to(host.dtype) * momentum)
    if running_var is not None:
        host = _native.backing_alias(running_var)
        unbiased = global_var * total / (total - 1)
        host.copy_(host * (1 - momentum) + unbiased.to(host.dtype) * momentum)
    dtype = mean.dtype
    return _device(global_mean.to(dtype)), _device((global_var + eps).rsqrt().to(dtype))


def _elemt(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    eps: float,
) -> Any:
    x = _native.backing_alias(input)
    out = (_acc(x) - _per_channel(_native.backing_alias(mean), x)) * _per_channel(_native.backing_alias(invstd), x)
    if weight is not None:
        out = out * _per_channel(_acc(_native.backing_alias(weight)), x)
    if bias is not None:
        out = out + _per_channel(_acc(_native.backing_alias(bias)), x)
    return _device(out.to(input.dtype))


def _backward_reduce(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    weight: torch.Tensor | None,
    input_g: bool,
    weight_g: bool,
    bias_g: bool,
) -> tuple[Any, Any, Any, Any]:
    dy = _acc(_native.backing_alias(grad_out))
    x = _acc(_native.backing_alias(input))
    dims = _reduced_dims(x)
    xmu = x - _per_channel(_native.backing_alias(mean), x)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * xmu).sum(dims)
    param_dtype = weight.dtype if weight is not None else mean.dtype
    grad_weight = (sum_dy_xmu * _native.backing_alias(invstd)).to(param_dtype)
    grad_bias = sum_dy.to(param_dtype)
    return _device(sum_dy), _device(sum_dy_xmu), _device(grad_weight), _device(grad_bias)


def _backward_elemt(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    weight: torch.Tensor | None,
    sum_dy: torch.Tensor,
    sum_dy_xmu: torch.Tensor,
    count: torch.Tensor,
) -> Any:
    dy = _acc(_native.backing_alias(grad_out))
    x = _acc(_native.backing_alias(input))
    total = _native.backing_alias(count).sum().to(torch.float64).item()
    istd = _per_channel(_native.backing_alias(invstd), x)
    mean_dy = _per_channel(_native.backing_alias(sum_dy), x) / total
    mean_dy_xmu = _per_channel(_native.backing_alias(sum_dy_xmu), x) / total
    xmu = x - _per_channel(_native.backing_alias(mean), x)
    grad = (dy - mean_dy - xmu * istd * istd * mean_dy_xmu) * istd
    if weight is not None:
        grad = grad * _per_channel(_acc(_native.backing_alias(weight)), x)
    return _device(grad.to(grad_out.dtype))


def register() -> None:
    """Register the five kernels for the HPU dispatch key, once per process."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("aten", "IMPL")
    library.impl("batch_norm_stats", _stats, "HPU")
    library.impl("batch_norm_gather_stats_with_counts", _gather_stats_with_counts, "HPU")
    library.impl("batch_norm_elemt", _elemt, "HPU")
    library.impl("batch_norm_backward_reduce", _backward_reduce, "HPU")
    library.impl("batch_norm_backward_elemt", _backward_elemt, "HPU")
    _library = library
