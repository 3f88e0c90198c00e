"""Emulation of ``transformer_engine.Linear``: a linear layer whose matrix products run on fp8 operands.

Sources (gaudi-pytorch-bridge 1.18.0, ``hpex/experimental/transformer_engine/module/linear.py`` and
``module/base.py``), rule by rule:

- ``Linear(in_features, out_features, sequence_parallel=False, tp_group=None, tp_size=1, get_rng_state_tracker=None,
  init_method=None, bias=True, return_bias=False, params_dtype=None, parallel_mode=None,
  skip_weight_param_allocation=False, device="hpu", minimize_memory=False)`` (``linear.py:419-434``): weight of shape
  ``(out_features, in_features)``, initialised from ``N(0, 0.023)`` unless ``init_method`` is given, and a zero bias,
  in ``params_dtype`` (the default dtype when ``None``), on ``device``; ``forward(inp, weight=None, bias=None,
  is_first_microbatch=None)``;
- outside an enabled ``fp8_autocast`` the layer is a plain linear layer;
- inside one, the forward casts the input and the weight to the recipe's forward dtype (two scaled tensors per
  layer, ``scaling_fwd``), multiplies them with float32 accumulation, multiplies by both ``scale_inv`` and returns
  the activation dtype (``torch.autocast``'s for ``"hpu"`` when it is on, else the input's). The backward casts the
  output gradient to the backward dtype (``scaling_bwd``); with HYBRID the input and weight are also cast to E5M2 for
  the backward products (``scaling_hybrid``, from the same amaxes as the forward: ``cast_to_fp8_hybrid``);
- delayed scaling, activation checkpointing and the saved fp8 state are the base module's (``module/base.py``):
  each forward runs inside ``prepare_forward``.

Not reproduced: Gaudi's fp8 matrix kernels (the emulator multiplies the exactly dequantized values in float32 on the
backing device, so products agree with an exact fp8 product up to float32 accumulation), fp8 weight caching across
micro-batches (``is_first_microbatch``) and tensor and sequence parallelism. ``PT_TE_DUMP_TENSORS=1`` saves the
operands as the SDK does (``<name>_inp_<run>_recompute_<phase>.pt``, ``..._weight_...``, and in the backward
``..._inputmap_fp8_...``, ``..._weight_bwd_...``, ``..._grad_output_...``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

# The names the SDK's module/linear.py imports are importable from here too (its public surface); the emulator's
# own helpers are private.
from .._cast import dequantize as _dequantize
from .._cast import quantize as _quantize
from ..constants import GemmParallelModes, dist_group_type
from ..cpp_extensions import cast_to_fp8 as cast_to_fp8
from ..cpp_extensions import cast_to_fp8_hybrid as cast_to_fp8_hybrid
from ..cpp_extensions import fp8_gemm as fp8_gemm
from ..distributed import allreduce as allreduce
from ..distributed import gather_along_first_dim as gather_along_first_dim
from ..distributed import gather_along_last_dim as gather_along_last_dim
from ..distributed import get_distributed_world_size as get_distributed_world_size
from ..distributed import initialize_affine_weight_hpu as initialize_affine_weight_hpu
from ..distributed import reduce_scatter_along_first_dim as reduce_scatter_along_first_dim
from ..distributed import set_tensor_model_parallel_attributes as set_tensor_model_parallel_attributes
from ..fp8 import FP8GlobalStateManager as FP8GlobalStateManager
from ..fp8 import MetaTensorType as MetaTensorType
from ..fp8 import get_fp8_te_dtype as get_fp8_te_dtype
from ..fp8 import get_fp8_te_sr as get_fp8_te_sr
from ..utils import FP8BwdTensors as FP8BwdTensors
from ..utils import FP8FwdTensors as FP8FwdTensors
from ..utils import cast_if_needed as cast_if_needed
from ..utils import divide as divide
from ..utils import get_default_init_method
from .base import TransformerEngineBaseModule, _record

__all__ = ["Linear"]

_INPUT, _WEIGHT = FP8FwdTensors.GEMM1_INPUT, FP8FwdTensors.GEMM1_WEIGHT

# With PT_TE_DUMP_TENSORS=1 the layers save their operands (for debugging numerics) under DUMP_TENSORS_PATH, read when
# the module loads (the SDK's linear.py:44-51, 80-86, 255-261).
DUMP_TENSORS_FLAG = "PT_TE_DUMP_TENSORS"
DUMP_TENSORS_PATH = os.getenv("PT_TE_DUMP_TENSORS_PATH", "te_tensors")


def DumpTensor(tensor: torch.Tensor, path: str) -> None:
    """``torch.save(tensor)`` as ``<DUMP_TENSORS_PATH>/<path>``, creating the folder."""
    os.makedirs(DUMP_TENSORS_PATH, exist_ok=True)
    torch.save(tensor, f"{DUMP_TENSORS_PATH}/{path}")


def _dumping() -> bool:
    return int(os.getenv(DUMP_TENSORS_FLAG, "0")) == 1


class _Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        inp: torch.Tensor,
        weight: torch.Tensor,
        fp8_meta: dict[str, Any],
        record_forward: bool,
        measure_backward: bool,
        activation_dtype: torch.dtype,
    ) -> torch.Tensor:
        if _dumping():
            phase = fp8_meta["in_activation_recompute_phase"]
            stem = f"{fp8_meta['name']}_{{}}_{fp8_meta['run_cnt']}_recompute_{phase}.pt"
            DumpTensor(inp, stem.format("inp"))
            DumpTensor(weight.data, stem.format("weight"))
        recipe = fp8_meta["recipe"]
        fwd, hybrid = fp8_meta["scaling_fwd"], fp8_meta.get("scaling_hybrid")
        fwd_dtype = get_fp8_te_dtype(recipe, fprop_tensor=True)
        fwd_max = recipe.fp8_format.value.max_fwd
        if record_forward:
            for meta in (fwd, hybrid):
                if meta is not None:
                    _record(meta, _INPUT, inp)
                    _record(meta, _WEIGHT, weight)
        x8 = _quantize(inp, fwd.scale[_INPUT], fwd_max, fwd_dtype)
        w8 = _quantize(weight, fwd.scale[_WEIGHT], fwd_max, fwd_dtype)
        out = _dequantize(x8, fwd.scale_inv[_INPUT]) @ _dequantize(w8, fwd.scale_inv[_WEIGHT]).t()
        # The backward products read fp8 operands: the forward casts, or E5M2 casts for HYBRID.
        if hybrid is not None:
            bwd_max = recipe.fp8_format.value.max_bwd
            x_bwd = _dequantize(
                _quantize(inp, hybrid.scale[_INPUT], bwd_max, torch.float8_e5m2), hybrid.scale_inv[_INPUT]
            )
            w_bwd = _dequantize(
                _quantize(weight, hybrid.scale[_WEIGHT], bwd_max, torch.float8_e5m2), hybrid.scale_inv[_WEIGHT]
            )
        else:
            x_bwd = _dequantize(x8, fwd.scale_inv[_INPUT])
            w_bwd = _dequantize(w8, fwd.scale_inv[_WEIGHT])
        ctx.save_for_backward(x_bwd, w_bwd)
        ctx.fp8_meta, ctx.measure = fp8_meta, measure_backward
        ctx.x8 = x8 if _dumping() else None
        ctx.input_dtype, ctx.weight_dtype = inp.dtype, weight.dtype
        return out.to(activation_dtype)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
        x_bwd, w_bwd = ctx.saved_tensors
        if ctx.x8 is not None:
            stem = f"{ctx.fp8_meta['name']}_{{}}_{ctx.fp8_meta['run_cnt']}.pt"
            DumpTensor(ctx.x8.to(torch.bfloat16), stem.format("inputmap_fp8"))
            DumpTensor(w_bwd, stem.format("weight_bwd"))
            DumpTensor(grad_output, stem.format("grad_output"))
        _, grad, _ = TransformerEngineBaseModule.grad_output_preprocess(ctx, grad_output, False, ctx.measure)
        grad_2d = grad.reshape(-1, grad.shape[-1])
        dgrad = (grad @ w_bwd).to(ctx.input_dtype)
        wgrad = (grad_2d.t() @ x_bwd.reshape(-1, x_bwd.shape[-1])).to(ctx.weight_dtype)
        return dgrad, wgrad, None, None, None, None


class Linear(TransformerEngineBaseModule):
    """A linear layer that computes in fp8 inside ``fp8_autocast(enabled=True)``.

    The arguments are the SDK's, in its order; only their single-device values are accepted.

    Args:
        in_features: Size of each input sample.
        out_features: Size of each output sample.
        sequence_parallel: Only ``False`` (no sequence parallelism).
        tp_group: Only ``None`` (no tensor parallelism).
        tp_size: Only ``1``.
        get_rng_state_tracker: Accepted; used by tensor parallelism only.
        init_method: Initialiser of the weight; ``N(0, 0.023)`` when ``None``, as on the SDK.
        bias: Whether the layer adds a learned bias.
        return_bias: Only ``False``.
        params_dtype: The parameters' dtype (the default dtype when ``None``).
        parallel_mode: Only ``None``.
        skip_weight_param_allocation: Create no weight; ``forward`` is then given one.
        device: Where the parameters are created (``"hpu"``).
        minimize_memory: Accepted; the emulator keeps no fp8 copies to save.

    Raises:
        NotImplementedError: For tensor or sequence parallelism or ``return_bias=True``.

    Example:
        >>> import torch
        >>> import habana_frameworks.torch.hpex.experimental.transformer_engine as te
        >>> layer = te.Linear(64, 32)
        >>> with te.fp8_autocast(enabled=True):
        ...     y = layer(torch.randn(8, 64, device="hpu"))  # doctest: +SKIP
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        sequence_parallel: bool = False,
        tp_group: dist_group_type | None = None,
        tp_size: int = 1,
        get_rng_state_tracker: Callable[..., Any] | None = None,
        init_method: Callable[..., Any] | None = None,
        bias: bool = True,
        return_bias: bool = False,
        params_dtype: torch.dtype | None = None,
        parallel_mode: str | None = None,
        skip_weight_param_allocation: bool = False,
        device: torch.device | str = "hpu",
        minimize_memory: bool = False,
    ) -> None:
        super().__init__()
        self.name = self.name + "_Linear"
        assert parallel_mode in GemmParallelModes, f"parallel_mode {parallel_mode} not supported"
        unsupported = {
            name: value
            for name, value, single in (
                ("sequence_parallel", sequence_parallel, False),
                ("tp_group", tp_group, None),
                ("tp_size", tp_size, 1),
                ("return_bias", return_bias, False),
                ("parallel_mode", parallel_mode, None),
            )
            if value != single
        }
        if unsupported:
            raise NotImplementedError(
                f"Linear({', '.join(f'{k}={v!r}' for k, v in unsupported.items())}): the emulated Transformer Engine "
                "runs single-device layers only (no tensor or sequence parallelism, no separate bias return)."
            )
        dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = bias
        self.return_bias = return_bias
        self.minimize_memory = minimize_memory
        self.weight: nn.Parameter | None = None
        if not skip_weight_param_allocation:
            self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))
            (init_method or get_default_init_method())(self.weight)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device)) if bias else None

    def extra_repr(self) -> str:
        """The sizes and whether there is a bias, as ``torch.nn.Linear`` shows them."""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.use_bias}"

    def forward(  # type: ignore[override]  # the SDK's base declares forward(self)
        self,
        inp: torch.Tensor,
        weight: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        is_first_microbatch: bool | None = None,
    ) -> torch.Tensor:
        """``inp @ weight.T + bias``, on fp8 operands inside an enabled ``fp8_autocast``.

        Args:
            inp: The input.
            weight: The weight to use in place of the layer's (required with ``skip_weight_param_allocation``).
            bias: The bias to use in place of the layer's.
            is_first_microbatch: Accepted for the SDK's signature; the emulator casts the weight in every step.
        """
        weight = self.weight if weight is None else weight
        bias = self.bias if bias is None else bias
        assert weight is not None, "Weight tensor must be provided when skip_weight_param_allocation=True"
        with self.prepare_forward(inp, is_first_microbatch) as (inp, _):
            if not self.fp8:
                return nn.functional.linear(inp, weight, bias)
            record_forward = self.fp8_meta["update_amax_fwd"]["fwd_enabled"]
            measure_backward = bool(self.fp8_meta["update_amax_bwd"])
            activation_dtype = self.activation_dtype or inp.dtype
            with torch.autocast(inp.device.type, enabled=False):
                out = _Fp8Linear.apply(inp, weight, self.fp8_meta, record_forward, measure_backward, activation_dtype)
        if bias is not None:
            out = out + bias.to(out.dtype)
        return out


# ``tex`` is the SDK's compiled extension: the name is here and refuses when used.
from ....._not_emulated import provide as _provide  # noqa: E402

_provide(globals(), "habana_frameworks.torch.hpex.experimental.transformer_engine.module.linear")
