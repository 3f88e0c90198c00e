"""Emulation of ``transformer_engine.utils``: the fp8 scaling state's containers and small helpers.

Source: gaudi-pytorch-bridge 1.18.0, ``hpex/experimental/transformer_engine/utils.py``. ``FP8TensorMeta`` holds a
scaling group's ``scale``, ``scale_inv``, ``amax_history`` and ``amax_history_index`` (the layer fills them in);
``FP8FwdTensors`` / ``FP8BwdTensors`` name the columns of those tensors. The default weight initialisation is
``N(0, 0.023)``.

Example:
    >>> from habana_frameworks.torch.hpex.experimental.transformer_engine.utils import FP8FwdTensors
    >>> FP8FwdTensors.GEMM1_WEIGHT
    1
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "FP8BwdTensors",
    "FP8FwdTensors",
    "FP8TensorMeta",
    "all_close",
    "assert_viewless_tensor",
    "cast_if_needed",
    "compare_tensors",
    "divide",
    "ensure_divisibility",
    "get_default_init_method",
    "init_method_normal",
    "is_gaudi3",
    "print_rank_0",
    "safely_set_viewless_tensor_data",
    "scaled_init_method_normal",
    "validate_ctx_manager",
    "validate_rng_states_func",
]


def init_method_normal(sigma: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """An initialiser drawing from ``N(0, sigma)``."""

    def init_(tensor: torch.Tensor) -> torch.Tensor:
        return torch.nn.init.normal_(tensor, mean=0.0, std=sigma)

    return init_


def scaled_init_method_normal(sigma: float, num_layers: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """An initialiser drawing from ``N(0, sigma / sqrt(2 * num_layers))``."""
    return init_method_normal(sigma / math.sqrt(2.0 * num_layers))


def get_default_init_method() -> Callable[[torch.Tensor], torch.Tensor]:
    """The weight initialiser used when a layer is given none: ``N(0, 0.023)``."""
    return init_method_normal(0.023)


def all_close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``torch.allclose`` on host copies."""
    return torch.allclose(a.cpu(), b.cpu())


def print_rank_0(*args: Any) -> None:
    """``print`` on the process whose current HPU is 0."""
    from .... import hpu

    if hpu.current_device() == 0:
        print(*args)


def compare_tensors(a: torch.Tensor, b: torch.Tensor) -> None:
    """Print both tensors, their largest difference and their maxima (rank 0)."""
    if a.shape != b.shape:
        print_rank_0("Tensors have different shape")
        return
    print_rank_0(a)
    print_rank_0(b)
    print_rank_0(f"max err={torch.max(torch.abs(a - b))}, max a={torch.max(a)}, max_b={torch.max(b)}")


def ensure_divisibility(numerator: int, denominator: int) -> None:
    """Assert that ``denominator`` divides ``numerator``."""
    assert numerator % denominator == 0, f"{numerator} is not divisible by {denominator}"


def divide(numerator: int, denominator: int) -> int:
    """``numerator // denominator``, asserting that the division is exact."""
    ensure_divisibility(numerator, denominator)
    return numerator // denominator


def validate_ctx_manager(ctx: Callable[[], Any]) -> None:
    """Raise ``ValueError`` unless ``ctx()`` works as a context manager."""
    try:
        with ctx():
            pass
    except Exception as exc:
        raise ValueError("Object must be a valid ctx manager") from exc


def validate_rng_states_func(get_rng_tracker: Callable[[], Any]) -> None:
    """Assert that ``get_rng_tracker()`` returns a tracker with ``get_states``, ``set_states`` and ``fork``."""
    assert callable(get_rng_tracker), "get_rng_tracker is not a valid function"
    try:
        tracker = get_rng_tracker()
    except Exception as exc:
        raise RuntimeError("Cannot call get_rng_tracker function") from exc
    for name in ("get_states", "set_states", "fork"):
        assert callable(getattr(tracker, name, None)), f"rng_tracker object does not have valid method {name}"
    validate_ctx_manager(tracker.fork)


def assert_viewless_tensor(tensor: Any, extra_msg: str | None = None) -> Any:
    """Assert that a tensor (or each of a list) is not a view; anything else is returned as it is."""
    if isinstance(tensor, list):
        return [assert_viewless_tensor(t) for t in tensor]
    if not isinstance(tensor, torch.Tensor):
        return tensor
    assert tensor._base is None, (
        "Ensure tensor._base is None before setting tensor.data or storing tensor to memory buffer. Otherwise, a "
        f"memory leak will occur (and likely accumulate over iterations). {extra_msg}"
    )
    return tensor


def safely_set_viewless_tensor_data(tensor: torch.Tensor, new_data_tensor: torch.Tensor) -> None:
    """``tensor.data = new_data_tensor``, after asserting that ``tensor`` is not a view."""
    base_shape = "--" if tensor._base is None else tensor._base.shape
    assert_viewless_tensor(
        tensor,
        extra_msg=f"FYI, tensor._base has shape {base_shape},and new_data_tensor has shape {new_data_tensor.shape}.",
    )
    tensor.data = new_data_tensor


def cast_if_needed(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor`` in ``dtype`` (itself when it already is, or ``None``)."""
    return tensor if tensor is None or tensor.dtype == dtype else tensor.to(dtype)


class FP8TensorMeta:
    """The scaling state of one group of fp8 tensors (one column per tensor); the layer sets the four tensors.

    Attributes:
        scale: The factor each tensor is multiplied by before its cast, shape ``(n,)``.
        scale_inv: ``1 / scale``, applied after the fp8 product.
        amax_history: The absolute maxima seen, shape ``(amax_history_len, n)``, a circular buffer.
        amax_history_index: The row the next amaxes go to (a one-element int32 tensor).
    """

    scale = torch.Tensor()
    scale_inv = torch.Tensor()
    amax_history = torch.Tensor()
    amax_history_index = torch.Tensor()


class FP8FwdTensors:
    """Columns of the forward scaling tensors: ``GEMM<k>_INPUT`` and ``GEMM<k>_WEIGHT`` for up to five GEMMs."""

    GEMM1_INPUT = 0
    GEMM1_WEIGHT = 1
    GEMM2_INPUT = 2
    GEMM2_WEIGHT = 3
    GEMM3_INPUT = 4
    GEMM3_WEIGHT = 5
    GEMM4_INPUT = 6
    GEMM4_WEIGHT = 7
    GEMM5_INPUT = 8
    GEMM5_WEIGHT = 9


class FP8BwdTensors:
    """Columns of the backward scaling tensors: ``GRAD_OUTPUT<k>`` for up to five GEMMs."""

    GRAD_OUTPUT1 = 0
    GRAD_OUTPUT2 = 1
    GRAD_OUTPUT3 = 2
    GRAD_OUTPUT4 = 3
    GRAD_OUTPUT5 = 4


def is_gaudi3() -> bool:
    """Whether the device is a Gaudi3 (asks the device's name)."""
    from .... import hpu

    return str(hpu.get_device_name()).split(" ")[0] == "GAUDI3"
