"""Emulation of ``transformer_engine.Linear``: a linear layer whose matrix products run on fp8 operands.

Sources (gaudi-pytorch-bridge 1.18.0, ``hpex/experimental/transformer_engine/module/linear.py`` and
``module/base.py``), rule by rule:

- ``Linear(in_features, out_features, ..., bias=True, ..., params_dtype=None, ..., device="hpu")``: weight of shape
  ``(out_features, in_features)`` and bias, in ``params_dtype`` (the default dtype when ``None``), on ``device``;
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
  scales as they are and measures nothing;
- the fp8 state is saved in the module's extra state (``get_extra_state``), so a checkpoint resumes with its scales.

Not reproduced: Gaudi's fp8 matrix kernels (the emulator multiplies the exactly dequantized values in float32 on the
backing device, so products agree with an exact fp8 product up to float32 accumulation), fp8 weight caching across
micro-batches (``is_first_microbatch``), tensor and sequence parallelism, activation recompute, and the SDK's
measurement dumps.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from . import fp8 as _fp8
from ._cast import dequantize, quantize
from .recipe import DelayedScaling, Format

__all__ = ["Linear"]

_INPUT, _WEIGHT = 0, 1
_GRAD_OUTPUT = 0


class _ScalingState:
    """The scaling groups of one layer, kept in its ``fp8_meta`` under the SDK's keys, and the recipe they follow."""

    def __init__(self, fp8_meta: dict[str, Any], recipe: DelayedScaling, device: torch.device) -> None:
        fp8_meta.clear()
        fp8_meta["recipe"] = recipe
        fp8_meta["fp8_max_fwd"] = recipe.fp8_format.value.max_fwd
        fp8_meta["fp8_max_bwd"] = recipe.fp8_format.value.max_bwd
        fp8_meta["scaling_fwd"] = _fp8.FP8TensorMeta(2, recipe.amax_history_len, device)
        fp8_meta["scaling_bwd"] = _fp8.FP8TensorMeta(1, recipe.amax_history_len, device)
        if recipe.fp8_format == Format.HYBRID:
            fp8_meta["scaling_hybrid"] = _fp8.FP8TensorMeta(2, recipe.amax_history_len, device)
        self.meta = fp8_meta
        self.recipe = recipe
        self.fwd: _fp8.FP8TensorMeta = fp8_meta["scaling_fwd"]
        self.bwd: _fp8.FP8TensorMeta = fp8_meta["scaling_bwd"]
        self.hybrid: _fp8.FP8TensorMeta | None = fp8_meta.get("scaling_hybrid")
        self.update_now = True
        self.bwd_measured = False


class _Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        inp: torch.Tensor,
        weight: torch.Tensor,
        state: _ScalingState,
        measure: bool,
        activation_dtype: torch.dtype,
    ) -> torch.Tensor:
        recipe = state.recipe
        fwd_dtype = _fp8.get_fp8_te_dtype(recipe, fprop_tensor=True)
        fwd_max = recipe.fp8_format.value.max_fwd
        if measure:
            state.fwd.record(_INPUT, inp)
            state.fwd.record(_WEIGHT, weight)
            if state.hybrid is not None:
                state.hybrid.record(_INPUT, inp)
                state.hybrid.record(_WEIGHT, weight)
        x8 = quantize(inp, state.fwd.scale[_INPUT], fwd_max, fwd_dtype)
        w8 = quantize(weight, state.fwd.scale[_WEIGHT], fwd_max, fwd_dtype)
        out = dequantize(x8, state.fwd.scale_inv[_INPUT]) @ dequantize(w8, state.fwd.scale_inv[_WEIGHT]).t()
        # The backward products read fp8 operands: the forward casts, or E5M2 casts for HYBRID.
        if state.hybrid is not None:
            bwd_max = recipe.fp8_format.value.max_bwd
            x_bwd = dequantize(
                quantize(inp, state.hybrid.scale[_INPUT], bwd_max, torch.float8_e5m2), state.hybrid.scale_inv[_INPUT]
            )
            w_bwd = dequantize(
                quantize(weight, state.hybrid.scale[_WEIGHT], bwd_max, torch.float8_e5m2),
                state.hybrid.scale_inv[_WEIGHT],
            )
        else:
            x_bwd = dequantize(x8, state.fwd.scale_inv[_INPUT])
            w_bwd = dequantize(w8, state.fwd.scale_inv[_WEIGHT])
        ctx.save_for_backward(x_bwd, w_bwd)
        ctx.state, ctx.measure = state, measure
        ctx.input_dtype, ctx.weight_dtype = inp.dtype, weight.dtype
        return out.to(activation_dtype)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
        x_bwd, w_bwd = ctx.saved_tensors
        state: _ScalingState = ctx.state
        recipe = state.recipe
        if ctx.measure:
            _prepare_backward(state)
            state.bwd.record(_GRAD_OUTPUT, grad_output)
        bwd_dtype = _fp8.get_fp8_te_dtype(recipe, fprop_tensor=False)
        g8 = quantize(
            grad_output,
            state.bwd.scale[_GRAD_OUTPUT],
            recipe.fp8_format.value.max_bwd,
            bwd_dtype,
            stochastic=_fp8.get_fp8_te_sr(recipe, fprop_tensor=False),
        )
        grad = dequantize(g8, state.bwd.scale_inv[_GRAD_OUTPUT])
        grad_2d = grad.reshape(-1, grad.shape[-1])
        dgrad = (grad @ w_bwd).to(ctx.input_dtype)
        wgrad = (grad_2d.t() @ x_bwd.reshape(-1, x_bwd.shape[-1])).to(ctx.weight_dtype)
        return dgrad, wgrad, None, None, None


def _prepare_backward(state: _ScalingState) -> None:
    # The backward scales follow the previous measured backward's amaxes.
    if state.bwd_measured:
        _fp8.amax_and_scale_update(state.bwd, state.recipe.fp8_format.value.max_bwd, state.recipe, state.update_now)
    state.bwd_measured = True


class Linear(nn.Module):
    """A linear layer that computes in fp8 inside ``fp8_autocast(enabled=True)``.

    Args:
        in_features: Size of each input sample.
        out_features: Size of each output sample.
        bias: Whether the layer adds a learned bias.
        params_dtype: The parameters' dtype (the default dtype when ``None``).
        device: Where the parameters are created (``"hpu"``).
        **kwargs: The SDK's other arguments (``sequence_parallel``, ``tp_group``, ``tp_size``, ``init_method``,
            ``return_bias``, ``parallel_mode``, ...); only their single-device values are accepted.

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
        bias: bool = True,
        params_dtype: torch.dtype | None = None,
        device: torch.device | str = "hpu",
        **kwargs: Any,
    ) -> None:
        super().__init__()
        unsupported = {
            key: value
            for key, value in kwargs.items()
            if value not in (None, False, 1) and key not in ("init_method", "get_rng_state_tracker", "minimize_memory")
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
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device)) if bias else None
        init_method = kwargs.get("init_method")
        if init_method is not None:
            init_method(self.weight)
        else:
            nn.init.kaiming_uniform_(self.weight, a=5**0.5)
        # The SDK's per-layer fp8 state: "recipe", "scaling_fwd" (input, weight), "scaling_bwd" (output gradient),
        # "scaling_hybrid" (E5M2 copies of input and weight, HYBRID only), each an FP8TensorMeta.
        self.fp8_meta: dict[str, Any] = {}
        self._scaling: _ScalingState | None = None
        self.run_cnt = 0
        self._fwd_measured = False

    def extra_repr(self) -> str:
        """The sizes and whether there is a bias, as ``torch.nn.Linear`` shows them."""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.use_bias}"

    def _state(self, recipe: DelayedScaling) -> _ScalingState:
        state = self._scaling
        if state is None or (state.recipe is not recipe and state.recipe != recipe):
            state = _ScalingState(self.fp8_meta, recipe, self.weight.device)
            self._scaling = state
            self._fwd_measured = False
        return state

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        """``inp @ weight.T + bias``, on fp8 operands inside an enabled ``fp8_autocast``."""
        if not _fp8.is_fp8_enabled():
            return nn.functional.linear(inp, self.weight, self.bias)
        recipe = _fp8.get_fp8_recipe()
        state = self._state(recipe)
        measure = False
        if self.training:
            self.run_cnt += 1
            interval, history = recipe.interval, recipe.amax_history_len
            state.update_now = interval == 1 or self.run_cnt % interval == 0
            if self._fwd_measured:
                _fp8.amax_and_scale_update(state.fwd, recipe.fp8_format.value.max_fwd, recipe, state.update_now)
                if state.hybrid is not None:
                    _fp8.amax_and_scale_update(state.hybrid, recipe.fp8_format.value.max_bwd, recipe, state.update_now)
            position = self.run_cnt % interval
            measure = interval == 1 or position in range(interval - history, interval)
            self._fwd_measured = measure
        if torch.is_autocast_enabled(inp.device.type):
            activation_dtype = torch.get_autocast_dtype(inp.device.type)
        else:
            activation_dtype = inp.dtype
        with torch.autocast(inp.device.type, enabled=False):
            out = _Fp8Linear.apply(inp, self.weight, state, measure and torch.is_grad_enabled(), activation_dtype)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
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
                    "amax_history_index": meta.row,
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
        recipe = DelayedScaling(**{**fields, "fp8_format": Format[fields["fp8_format"]]})
        state = _ScalingState(self.fp8_meta, recipe, self.weight.device)
        for key in ("fwd", "bwd", "hybrid"):
            meta = getattr(state, key)
            if meta is not None and key in saved:
                meta.scale = saved[key]["scale"].to(self.weight.device)
                meta.scale_inv = torch.reciprocal(meta.scale)
                meta.amax_history = saved[key]["amax_history"].to(self.weight.device)
                meta.amax_history_index.fill_(int(saved[key]["amax_history_index"]))
        state.bwd_measured = bool(saved.get("bwd_measured", False))
        self._scaling = state
        self.run_cnt = int(saved.get("run_cnt", 0))
        self._fwd_measured = bool(saved.get("fwd_measured", False))
