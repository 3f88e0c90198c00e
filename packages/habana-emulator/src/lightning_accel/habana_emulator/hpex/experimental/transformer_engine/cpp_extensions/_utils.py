"""Emulation of ``transformer_engine.cpp_extensions._utils``: run a cast, record its amax in the scaling history."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..utils import FP8BwdTensors, FP8FwdTensors, FP8TensorMeta

__all__ = ["FP8BwdTensors", "FP8FwdTensors", "FP8TensorMeta", "select_amax_and_exec"]


def _update_amax_history(new_amax: torch.Tensor, fp8_meta_tensor: FP8TensorMeta, fp8_tensor: int) -> None:
    # The current row of the history gets the amax, in the tensor's column.
    meta = fp8_meta_tensor
    row = int(meta.amax_history_index.reshape(-1)[0]) if meta.amax_history.shape[0] > 1 else 0
    meta.amax_history[row, fp8_tensor] = new_amax


def select_amax_and_exec(
    operator: Callable[[], Any],
    fp8_meta_tensor: FP8TensorMeta,
    fp8_tensor: Any,
    fp8_meta_tensor2: FP8TensorMeta | None = None,
    measure_amax: bool = True,
) -> Any:
    """Run ``operator`` (whose last output is the amax) and record that amax; return the other outputs."""
    outputs = operator()
    if measure_amax:
        _update_amax_history(outputs[-1], fp8_meta_tensor, fp8_tensor)
        if fp8_meta_tensor2 is not None:
            _update_amax_history(outputs[-1], fp8_meta_tensor2, fp8_tensor)
    return outputs[:-1]
