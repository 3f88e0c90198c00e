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
- delayed scaling: a training forward records the amaxes of the tensors it casts in the current history row; the
  next training forward first updates the forward scales from them (``prepare_forward``), the next backward the
  backward scales (``_prepare_backward``). Scales are recomputed when ``interval == 1`` or every ``interval`` runs;
  amaxes are measured in the last ``amax_history_len`` runs of each interval. A forward in evaluation mode uses the
  scales as they are and measures nothing. ``fp8_autocast(force_measurement=...)`` or ``fp8.set_measurement_mode``
  force measurement on or off;
- the fp8 state is saved in the module's extra state (``get_extra_state``), so a checkpoint resumes with its scales.

Not reproduced: Gaudi's fp8 matrix kernels (the emulator multiplies the exactly dequantized values in float32 on the
backing device, so products agree with an exact fp8 product up to float32 accumulation), fp8 weight caching across
micro-batches (``is_first_microbatch``), tensor and sequence parallelism, activation recompute, and the SDK's
measurement dumps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

# The names the SDK's module/linear.py imports are importable from here too (its public surface); the emulator's
# own helpers are private.
from .. import fp8 as _fp8
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
from ..distributed import is_fp8_activation_recompute_enabled as _is_fp8_activation_recompute_enabled
from ..distributed import reduce_scatter_along_first_dim as reduce_scatter_along_first_dim
from ..distributed import set_tensor_model_parallel_attributes as set_tensor_model_parallel_attributes
from ..fp8 import FP8GlobalStateManager
from ..fp8 import MetaTensorType as MetaTensorType
from ..fp8 import get_fp8_te_dtype as get_fp8_te_dtype
from ..fp8 import get_fp8_te_sr as get_fp8_te_sr
from ..recipe import DelayedScaling as _DelayedScaling
from ..recipe import Format as _Format
from ..utils import FP8BwdTensors as FP8BwdTensors
from ..utils import FP8FwdTensors as FP8FwdTensors
from ..utils import FP8TensorMeta as _FP8TensorMeta
from ..utils import cast_if_needed as cast_if_needed
from ..utils import divide as divide
from ..utils import get_default_init_method

__all__ = ["Linear"]

_INPUT, _WEIGHT = 0, 1
_GRAD_OUTPUT = 0


def _new_meta(num_tensors: int, history_len: int, device: torch.device) -> _FP8TensorMeta:
    meta = _FP8TensorMeta()
    meta.scale = torch.ones(num_tensors, dtype=torch.float32, device=device)
    meta.scale_inv = torch.ones(num_tensors, dtype=torch.float32, device=device)
    meta.amax_history = torch.zeros(history_len, num_tensors, dtype=torch.float32, device=device)
    meta.amax_history_index = torch.zeros(1, dtype=torch.int32, device=device)
    return meta


def _row(meta: _FP8TensorMeta) -> int:
    return int(meta.amax_history_index[0])


def _record(meta: _FP8TensorMeta, column: int, tensor: torch.Tensor) -> None:
    # The amax of this step goes to the current row of the circular history.
    meta.amax_history[_row(meta), column] = tensor.detach().abs().max().float()


def _update(fp8_meta: dict[str, Any], forward: bool, perform_scale_update: bool) -> None:
    """Reduce the latest amaxes over the fp8 group (``reduce_amax``), then the SDK's scale update."""
    recipe: _DelayedScaling = fp8_meta["recipe"]
    if recipe.reduce_amax:
        keys = ["scaling_fwd", "scaling_hybrid"] if forward else ["scaling_bwd"]
        for key in keys:
            meta = fp8_meta.get(key)
            if meta is not None:
                latest = meta.amax_history[_row(meta)].clone()
                FP8GlobalStateManager.reduce_tensor_across_group_op_max(latest, FP8GlobalStateManager.get_fp8_group())
                meta.amax_history[_row(meta)] = latest
    _fp8.amax_and_scale_update(fp8_meta, forward, perform_scale_update)


class _ScalingState:
    """The scaling groups of one layer, kept in its ``fp8_meta`` under the SDK's keys, and the recipe they follow."""

    def __init__(self, fp8_meta: dict[str, Any], recipe: _DelayedScaling, device: torch.device) -> None:
        # A new recipe starts the scaling afresh; the activation-recompute phase is the layer's, not the recipe's.
        phase = fp8_meta.get("in_activation_recompute_phase", False)
        fp8_meta.clear()
        fp8_meta["in_activation_recompute_phase"] = phase
        fp8_meta["recipe"] = recipe
        fp8_meta["fp8_max_fwd"] = recipe.fp8_format.value.max_fwd
        fp8_meta["fp8_max_bwd"] = recipe.fp8_format.value.max_bwd
        fp8_meta["scaling_fwd"] = _new_meta(2, recipe.amax_history_len, device)
        fp8_meta["scaling_bwd"] = _new_meta(1, recipe.amax_history_len, device)
        if recipe.fp8_format == _Format.HYBRID:
            fp8_meta["scaling_hybrid"] = _new_meta(2, recipe.amax_history_len, device)
        self.meta = fp8_meta
        self.recipe = recipe
        self.fwd: _FP8TensorMeta = fp8_meta["scaling_fwd"]
        self.bwd: _FP8TensorMeta = fp8_meta["scaling_bwd"]
        self.hybrid: _FP8TensorMeta | None = fp8_meta.get("scaling_hybrid")
        self.update_now = True
        self.bwd_measured = False


class _Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        inp: torch.Tensor,
        weight: torch.Tensor,
        state: _ScalingState,
        record_forward: bool,
        measure_backward: bool,
        activation_dtype: torch.dtype,
    ) -> torch.Tensor:
        recipe = state.recipe
        fwd_dtype = _fp8.get_fp8_te_dtype(recipe, fprop_tensor=True)
        fwd_max = recipe.fp8_format.value.max_fwd
        if record_forward:
            _record(state.fwd, _INPUT, inp)
            _record(state.fwd, _WEIGHT, weight)
            if state.hybrid is not None:
                _record(state.hybrid, _INPUT, inp)
                _record(state.hybrid, _WEIGHT, weight)
        x8 = _quantize(inp, state.fwd.scale[_INPUT], fwd_max, fwd_dtype)
        w8 = _quantize(weight, state.fwd.scale[_WEIGHT], fwd_max, fwd_dtype)
        out = _dequantize(x8, state.fwd.scale_inv[_INPUT]) @ _dequantize(w8, state.fwd.scale_inv[_WEIGHT]).t()
        # The backward products read fp8 operands: the forward casts, or E5M2 casts for HYBRID.
        if state.hybrid is not None:
            bwd_max = recipe.fp8_format.value.max_bwd
            x_bwd = _dequantize(
                _quantize(inp, state.hybrid.scale[_INPUT], bwd_max, torch.float8_e5m2), state.hybrid.scale_inv[_INPUT]
            )
            w_bwd = _dequantize(
                _quantize(weight, state.hybrid.scale[_WEIGHT], bwd_max, torch.float8_e5m2),
                state.hybrid.scale_inv[_WEIGHT],
            )
        else:
            x_bwd = _dequantize(x8, state.fwd.scale_inv[_INPUT])
            w_bwd = _dequantize(w8, state.fwd.scale_inv[_WEIGHT])
        ctx.save_for_backward(x_bwd, w_bwd)
        ctx.state, ctx.measure = state, measure_backward
        ctx.input_dtype, ctx.weight_dtype = inp.dtype, weight.dtype
        return out.to(activation_dtype)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
        x_bwd, w_bwd = ctx.saved_tensors
        state: _ScalingState = ctx.state
        recipe = state.recipe
        if ctx.measure:
            _prepare_backward(state)
            _record(state.bwd, _GRAD_OUTPUT, grad_output)
        bwd_dtype = _fp8.get_fp8_te_dtype(recipe, fprop_tensor=False)
        g8 = _quantize(
            grad_output,
            state.bwd.scale[_GRAD_OUTPUT],
            recipe.fp8_format.value.max_bwd,
            bwd_dtype,
            stochastic=_fp8.get_fp8_te_sr(recipe, fprop_tensor=False),
        )
        grad = _dequantize(g8, state.bwd.scale_inv[_GRAD_OUTPUT])
        grad_2d = grad.reshape(-1, grad.shape[-1])
        dgrad = (grad @ w_bwd).to(ctx.input_dtype)
        wgrad = (grad_2d.t() @ x_bwd.reshape(-1, x_bwd.shape[-1])).to(ctx.weight_dtype)
        return dgrad, wgrad, None, None, None, None


def _prepare_backward(state: _ScalingState) -> None:
    # The backward scales follow the previous measured backward's amaxes.
    if state.bwd_measured:
        _update(state.meta, False, state.update_now)
    state.bwd_measured = True


class Linear(nn.Module):
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
        self._device = torch.device(device)
        # The SDK's per-layer fp8 state: "recipe", "scaling_fwd" (input, weight), "scaling_bwd" (output gradient),
        # "scaling_hybrid" (E5M2 copies of input and weight, HYBRID only), each an FP8TensorMeta.
        self.fp8_meta: dict[str, Any] = {}
        self._scaling: _ScalingState | None = None
        self.run_cnt = 0
        self._fwd_measured = False
        self._recompute_in_fp8 = False

    def get_fp8_weights_scratchpad(self, is_first_microbatch: bool | None) -> list[torch.Tensor | None]:
        """The fp8 copies of the weight kept across micro-batches: none (the emulator casts it in every step)."""
        return [None, None]

    def extra_repr(self) -> str:
        """The sizes and whether there is a bias, as ``torch.nn.Linear`` shows them."""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.use_bias}"

    def _state(self, recipe: _DelayedScaling, device: torch.device) -> _ScalingState:
        state = self._scaling
        if state is None or (state.recipe is not recipe and state.recipe != recipe):
            state = _ScalingState(self.fp8_meta, recipe, device)
            self._scaling = state
            self._fwd_measured = False
        return state

    def _recompute_phase(self) -> bool:
        """Whether this forward is the recompute of an activation checkpoint (the SDK's ``prepare_forward``)."""
        if not _is_fp8_activation_recompute_enabled():
            self.fp8_meta["in_activation_recompute_phase"] = False
        elif not torch.is_grad_enabled():
            self.fp8_meta["in_activation_recompute_phase"] = False  # the first run, gradients off
        elif self.fp8_meta.get("in_activation_recompute_phase") is False:
            self.fp8_meta["in_activation_recompute_phase"] = True  # gradients on after off: the recompute
        return bool(self.fp8_meta.get("in_activation_recompute_phase", False))

    def _measures(self, recipe: _DelayedScaling) -> bool:
        manual = FP8GlobalStateManager.get_manual_measurement_mode()
        if manual is not None:
            return bool(manual)
        interval, history = recipe.interval, recipe.amax_history_len
        # Amaxes are measured in the last ``amax_history_len`` runs of each interval.
        return interval == 1 or self.run_cnt % interval in range(interval - history, interval)

    def forward(
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
        recompute = self.training and self._recompute_phase()
        # The recompute of an activation checkpoint runs in the backward pass, outside fp8_autocast: like the SDK
        # (whose prepare_forward skips fp8_init then), it computes as the first run did, with its scales.
        if not (self._recompute_in_fp8 if recompute else FP8GlobalStateManager.is_fp8_enabled()):
            return nn.functional.linear(inp, weight, bias)
        recipe = self._scaling.recipe if recompute and self._scaling is not None else None
        recipe = recipe or FP8GlobalStateManager.get_fp8_recipe() or _fp8.get_default_fp8_recipe()
        state = self._state(recipe, weight.device)
        record_forward = measure_backward = False
        if recompute:
            # The scales of the first run, nothing recorded anew.
            FP8GlobalStateManager.get_old_fp8_meta_tensors_for_recompute(self.fp8_meta)
            measure_backward = self._fwd_measured
        elif self.training:
            self.run_cnt += 1
            interval = recipe.interval
            state.update_now = interval == 1 or self.run_cnt % interval == 0
            if self._fwd_measured:
                _update(state.meta, True, state.update_now)
            measure = self._measures(recipe)
            self._fwd_measured = measure
            checkpointed = _is_fp8_activation_recompute_enabled()
            # Under checkpointing the first run has gradients off and still measures (the SDK's rule).
            record_forward = measure and (torch.is_grad_enabled() or checkpointed)
            measure_backward = measure and torch.is_grad_enabled()
            if checkpointed:
                FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute(self.fp8_meta)
                self._recompute_in_fp8 = True
        if torch.is_autocast_enabled(inp.device.type):
            activation_dtype = torch.get_autocast_dtype(inp.device.type)
        else:
            activation_dtype = inp.dtype
        try:
            with torch.autocast(inp.device.type, enabled=False):
                out = _Fp8Linear.apply(inp, weight, state, record_forward, measure_backward, activation_dtype)
        finally:
            if recompute:
                FP8GlobalStateManager.restore_fp8_meta_tensors(self.fp8_meta)
        if bias is not None:
            out = out + bias.to(out.dtype)
        return out

    def get_extra_state(self) -> dict[str, Any]:
        """The fp8 scaling state (scales, amax histories), saved in ``state_dict``."""
        state = self._scaling
        if state is None:
            return {}
        saved: dict[str, Any] = {"run_cnt": self.run_cnt, "fwd_measured": self._fwd_measured}
        for key in ("fwd", "bwd", "hybrid"):
            meta = getattr(state, key)
            if meta is not None:
                saved[key] = {
                    "scale": meta.scale.detach().cpu(),
                    "amax_history": meta.amax_history.detach().cpu(),
                    "amax_history_index": _row(meta),
                }
        saved["bwd_measured"] = state.bwd_measured
        # Plain values only, so that checkpoints load with torch.load(weights_only=True).
        recipe = state.recipe
        saved["recipe"] = {
            "margin": recipe.margin,
            "interval": recipe.interval,
            "fp8_format": recipe.fp8_format.name,
            "amax_history_len": recipe.amax_history_len,
            "amax_compute_algo": recipe.amax_compute_algo if isinstance(recipe.amax_compute_algo, str) else "max",
            "reduce_amax": recipe.reduce_amax,
        }
        return saved

    def set_extra_state(self, saved: Any) -> None:
        """Restore what :meth:`get_extra_state` saved."""
        if not saved:
            return
        fields = dict(saved["recipe"])
        recipe = _DelayedScaling(**{**fields, "fp8_format": _Format[fields["fp8_format"]]})
        state = _ScalingState(self.fp8_meta, recipe, self._device)
        for key in ("fwd", "bwd", "hybrid"):
            meta = getattr(state, key)
            if meta is not None and key in saved:
                meta.scale = saved[key]["scale"].to(self._device)
                meta.scale_inv = torch.reciprocal(meta.scale)
                meta.amax_history = saved[key]["amax_history"].to(self._device)
                meta.amax_history_index.fill_(int(saved[key]["amax_history_index"]))
        state.bwd_measured = bool(saved.get("bwd_measured", False))
        self._scaling = state
        self.run_cnt = int(saved.get("run_cnt", 0))
        self._fwd_measured = bool(saved.get("fwd_measured", False))
