"""Emulation of ``transformer_engine.cpp_extensions.activation``: ``fp8_gelu``, which the emulator does not provide.

The SDK's ``fp8_gelu`` calls the fused kernel ``torch.ops.hpu.fp8_gelu_v2`` (GELU, cast to fp8 and amax in one
Gaudi kernel, ``scripts/ops_list/custom_ops_list.csv:111`` at bridge 1.19.0), whose GELU approximation and the
tensor it retains for the backward are not public. The emulator keeps the name and refuses the call.
"""

from __future__ import annotations

from typing import Any, NoReturn

import torch

from ..utils import FP8BwdTensors, FP8FwdTensors, FP8TensorMeta
from ._utils import select_amax_and_exec

__all__ = ["FP8BwdTensors", "FP8FwdTensors", "FP8TensorMeta", "fp8_gelu", "select_amax_and_exec"]


def fp8_gelu(
    inp: torch.Tensor,
    fp8_meta_tensor: FP8TensorMeta,
    fp8_tensor: Any,
    otype: torch.dtype,
    retain: torch.Tensor | None = None,
    stochastic_rounding: bool = False,
    measure_amax: bool = True,
) -> NoReturn:
    """Not emulated: always raises.

    Raises:
        NotImplementedError: Naming the function and why.
    """
    raise NotImplementedError(
        "habana_frameworks.torch.hpex.experimental.transformer_engine.cpp_extensions.fp8_gelu is not emulated: it is "
        "the SDK's fused Gaudi kernel torch.ops.hpu.fp8_gelu_v2, whose GELU approximation is not public. Apply "
        "torch.nn.functional.gelu, then cpp_extensions.cast_to_fp8."
    )
