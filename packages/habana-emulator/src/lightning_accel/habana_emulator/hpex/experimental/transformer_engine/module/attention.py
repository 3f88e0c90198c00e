"""Emulation of ``transformer_engine.FusedAttention``: scaled-dot-product attention on fp8 q, k and v.

Sources (gaudi-pytorch-bridge 1.18.0, ``hpex/experimental/transformer_engine/module/attention.py``), rule by rule:

- ``FusedAttention(scale, attention_dropout, enable_recompute)`` (``attention.py:249-262``), a layer without
  weights; ``forward(query_layer, key_layer, value_layer, attention_mask=None, is_causal=False,
  softmax_mode="None")`` (``attention.py:273-281``);
- outside an enabled ``fp8_autocast`` it is the bf16 ``FusedSDPA`` under ``hpu.sdp_kernel(enable_recompute=...)``
  (``attention.py:291-302``);
- inside one, within ``prepare_forward(None, None, num_gemms=2)`` (four forward and two backward scaled tensors,
  ``attention.py:304-306``): q, k and v are cast to the recipe's forward fp8 dtype with the forward group's scales
  (``cast_to_fp8`` at the Q, K, V slots ``GEMM1_INPUT``, ``GEMM1_WEIGHT``, ``GEMM2_INPUT``, their amaxes recorded
  when the run measures; ``attention.py:36-38, 88-113``), the fp8 attention kernel runs on them
  (``fp8_sdpa_fwd_wrapper`` with their inverse scales and the scale of S, ``attention.py:121-139``) and the amax of
  the softmax output S goes to the S slot ``GEMM2_WEIGHT`` (``attention.py:39, 140-141``). The backward casts the
  output gradient to the backward fp8 dtype (slot ``GRAD_OUTPUT1``, ``attention.py:196-205``), runs the fp8 backward
  kernel (``torch.ops.hpu.fp8_sdpa_bwd``) and records the amax of dS at ``GRAD_OUTPUT2`` (``attention.py:40-41,
  211-233``); ``PT_TE_OVERRIDE_SDPA_BWD_PRECISSION=bf16`` takes the bf16 backward instead (``attention.py:180-194``)
  and ``PT_TE_OVERRIDE_SDPA_DOUT`` reads the output gradient from a file (``attention.py:154-157``);
- HYBRID recipes on a Gaudi2 are refused with the SDK's words, ``"Hybrid mode not supported on Gaudi2 yet"``
  (``attention.py:88, 114-115``).

Numerics (the emulator's, not Gaudi's kernel's): the casts are the emulated ``cast_to_fp8``'s; the attention is the
emulated ``Fp8FusedSDPA``'s (float32 attention on the exactly dequantized fp8 values, see its module), and the
backward is the float32 attention backward on the dequantized q, k, v and output gradient. So the output equals bf16
attention on the quantize-dequantized inputs; Gaudi's kernel also rounds S and dS to fp8, which the emulator does not.

Training with ``enable_recompute=True`` is refused: the SDK's layer reads the outputs (``attention.py:121``) and the
saved tensors (``attention.py:166``) of the non-recompute kernel only, and the recompute variant returns and keeps
others (``hpex/kernels/Fp8FusedSDPA.py:151, 184-185`` at 1.18.0; ``:171-209`` at bcc5172), so the SDK fails there.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch

from ..cpp_extensions import cast_to_fp8 as cast_to_fp8
from ..cpp_extensions._utils import _update_amax_history
from ..fp8 import FP8GlobalStateManager as FP8GlobalStateManager
from ..fp8 import MetaTensorType as MetaTensorType
from ..fp8 import get_fp8_te_dtype as get_fp8_te_dtype
from ..fp8 import get_fp8_te_sr as get_fp8_te_sr
from ..utils import FP8BwdTensors as FP8BwdTensors
from ..utils import FP8FwdTensors as FP8FwdTensors
from ..utils import is_gaudi3 as is_gaudi3
from .base import TransformerEngineBaseModule as TransformerEngineBaseModule
from .base import _prepare_backward
from .linear import DUMP_TENSORS_FLAG as DUMP_TENSORS_FLAG
from .linear import DUMP_TENSORS_PATH as DUMP_TENSORS_PATH
from .linear import DumpTensor as DumpTensor
from .linear import _dumping

# The SDK's __all__ names "FusedSDPA", which the module lacks (attention.py:34); the emulator's names its layer.
__all__ = ["FusedAttention"]

# The scaling slots of q, k, v and S in the forward group and of dout and dS in the backward group (attention.py:36-41).
FP8_META_ID_Q = FP8FwdTensors.GEMM1_INPUT
FP8_META_ID_K = FP8FwdTensors.GEMM1_WEIGHT
FP8_META_ID_V = FP8FwdTensors.GEMM2_INPUT
FP8_META_ID_S = FP8FwdTensors.GEMM2_WEIGHT
FP8_META_ID_DO = FP8BwdTensors.GRAD_OUTPUT1
FP8_META_ID_DS = FP8BwdTensors.GRAD_OUTPUT2

# Debug switches, read when the module loads (attention.py:46-47).
OVERRIDE_TE_SDPA_DOUT_PATH = os.getenv("PT_TE_OVERRIDE_SDPA_DOUT", "")
OVERRIDE_SDPA_PRECISSION = os.getenv("PT_TE_OVERRIDE_SDPA_BWD_PRECISSION", "")

# The SDK's module imports these from hpex.kernels (attention.py:24-26); the emulator's Transformer Engine loads
# before its hpu module (the fp8 casts are registered early), so they are looked up when first used.
_FROM_KERNELS = {
    "sdpa_kernel": ("", "FusedSDPA"),
    # The 1.18.0 contract, which this 1.18.0 layer was written against (see the kernel module).
    "fp8_sdpa_fwd_wrapper": (".Fp8FusedSDPA", "_fp8_sdpa_fwd_wrapper_1_18"),
    "fp8_sdpa_bwd_wrapper": ("", "fp8_sdpa_bwd_wrapper"),
    "gqa_output_reshape": ("", "gqa_output_reshape"),
    "gqa_input_reshape_bwd": (".FusedSDPA", "gqa_input_reshape_bwd"),
}


# The emulator's package (the SDK's habana_frameworks.torch), five levels above this module.
_ROOT = __name__.rsplit(".", 5)[0]


def __getattr__(name: str) -> Any:
    if name not in _FROM_KERNELS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    submodule, attribute = _FROM_KERNELS[name]
    kernels = importlib.import_module(f"{_ROOT}.hpex.kernels{submodule}")
    return getattr(kernels, attribute)


def _hpu() -> Any:
    return importlib.import_module(f"{_ROOT}.hpu")


def _fp8_backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
    kernel = importlib.import_module(f"{_ROOT}.hpex.kernels.Fp8FusedSDPA")
    return kernel._backward(ctx, dout)


_RECOMPUTE_REFUSAL = (
    "FusedAttention(enable_recompute=True) cannot train in fp8: the SDK's FusedAttnFunc reads the outputs and saved "
    "tensors of the non-recompute fp8 attention kernel only (transformer_engine/module/attention.py:121, 166), and the "
    "recompute kernel returns and keeps others, so the SDK fails here. Construct FusedAttention(..., "
    "enable_recompute=False) for fp8 training."
)


class FusedAttnFunc(torch.autograd.Function):
    """Fp8 attention with separate q, k and v: the casts, the kernel and the amaxes of S and dS."""

    @staticmethod
    def forward(
        ctx: Any,
        query_layer: torch.Tensor,
        key_layer: torch.Tensor,
        value_layer: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_dropout: float,
        is_causal: bool,
        scale: float,
        softmax_mode: str,
        fp8: bool,
        fp8_meta: dict[str, Any],
        amax_measure_state: dict[str, bool],
        is_scale_update_required: bool,
    ) -> torch.Tensor:
        requires_grad = query_layer.requires_grad or key_layer.requires_grad or value_layer.requires_grad
        recipe = fp8_meta["recipe"]
        fp8_dtype_forward = get_fp8_te_dtype(recipe, fprop_tensor=True)
        assert fp8
        if _dumping():
            stem = f"{fp8_meta['name']}_{{}}_{fp8_meta['run_cnt']}.pt"
            for name, tensor in (("q", query_layer), ("k", key_layer), ("v", value_layer)):
                DumpTensor(tensor, stem.format(name))
        hybrid_mode = FP8GlobalStateManager.is_hybrid_mode(fp8_meta)
        if hybrid_mode and not is_gaudi3():
            raise AssertionError("Hybrid mode not supported on Gaudi2 yet")
        meta = fp8_meta[FP8GlobalStateManager.get_meta_tensor_key(MetaTensorType.FORWARD)]
        sr = get_fp8_te_sr(recipe, fprop_tensor=True)
        measure = amax_measure_state["fwd_enabled"]
        q8, k8, v8 = (
            cast_to_fp8(tensor, meta, slot, fp8_dtype_forward, stochastic_rounding=sr, measure_amax=measure)
            for tensor, slot in ((query_layer, FP8_META_ID_Q), (key_layer, FP8_META_ID_K), (value_layer, FP8_META_ID_V))
        )
        # The wrapper reads whether to train from the fp8 tensors (attention.py:117-119).
        if requires_grad:
            q8.requires_grad_()
        outputs = __getattr__("fp8_sdpa_fwd_wrapper")(
            ctx,
            q8,
            k8,
            v8,
            attn_mask=attention_mask,
            dropout_p=attention_dropout,
            is_causal=is_causal,
            scale=scale,
            softmax_mode=softmax_mode,
            d_scale_q=meta.scale_inv[FP8_META_ID_Q],
            d_scale_k=meta.scale_inv[FP8_META_ID_K],
            d_scale_v=meta.scale_inv[FP8_META_ID_V],
            q_scale_s=meta.scale[FP8_META_ID_S],
            is_amax_s=measure or not hybrid_mode,
        )
        if requires_grad and ctx.recompute:
            # The SDK's backward would fail unpacking the recompute variant's saved tensors (attention.py:166).
            raise ValueError(_RECOMPUTE_REFUSAL)
        out, amax_s, _ = outputs
        if measure:
            _update_amax_history(amax_s, meta, FP8_META_ID_S)
        if requires_grad:
            ctx.fp8_meta = fp8_meta
            ctx.amax_measure_state = dict(amax_measure_state)
            ctx.fwd_scale_inv = meta.scale_inv.clone()
            ctx.input_dtypes = (query_layer.dtype, key_layer.dtype, value_layer.dtype)
            # The wrapper dequantizes the saved fp8 q, k, v with the scales of this forward, not later ones.
            ctx.d_scales = tuple(ctx.fwd_scale_inv[slot] for slot in (FP8_META_ID_Q, FP8_META_ID_K, FP8_META_ID_V))
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor, *args: Any) -> tuple[Any, ...]:
        if OVERRIDE_TE_SDPA_DOUT_PATH:
            print(f"Overriding te.FusedAttention dout with {OVERRIDE_TE_SDPA_DOUT_PATH}")
            dout = torch.load(OVERRIDE_TE_SDPA_DOUT_PATH)
        fp8_meta = ctx.fp8_meta
        measure = ctx.amax_measure_state["bwd_enabled"]
        if _dumping():
            DumpTensor(dout, f"{fp8_meta['name']}_dout_{fp8_meta['run_cnt']}.pt")
        if measure:
            # The backward scales follow the amaxes of the previous measured backward (the emulated base's rule).
            _prepare_backward(fp8_meta)
        if OVERRIDE_SDPA_PRECISSION == "bf16":
            dq, dk, dv, _ = _fp8_backward(ctx, dout)
        else:
            recipe = fp8_meta["recipe"]
            meta = fp8_meta[FP8GlobalStateManager.get_meta_tensor_key(MetaTensorType.BACKWARD)]
            dout_fp8 = cast_to_fp8(
                dout,
                meta,
                FP8_META_ID_DO,
                get_fp8_te_dtype(recipe, fprop_tensor=False),
                stochastic_rounding=get_fp8_te_sr(recipe, fprop_tensor=False),
                measure_amax=measure,
            )
            dout_values = dout_fp8.float() * meta.scale_inv[FP8_META_ID_DO]
            dq, dk, dv, dscores = _fp8_backward(ctx, dout_values)
            if measure:
                _update_amax_history(dscores.abs().amax(), meta, FP8_META_ID_DS)
        q_dtype, k_dtype, v_dtype = ctx.input_dtypes
        dq, dk, dv = dq.to(q_dtype), dk.to(k_dtype), dv.to(v_dtype)
        if _dumping():
            stem = f"{fp8_meta['name']}_{{}}_{fp8_meta['run_cnt']}.pt"
            for name, tensor in (("dq", dq), ("dk", dk), ("dv", dv)):
                DumpTensor(tensor, stem.format(name))
        return (dq, dk, dv, *([None] * 9))


class FusedAttention(TransformerEngineBaseModule):
    """Fused scaled-dot-product attention, on fp8 q, k and v inside ``fp8_autocast(enabled=True)``.

    Args:
        scale: The factor of ``q @ k.T`` (``None``: ``1 / sqrt(head_dim)``).
        attention_dropout: The dropout probability of the attention weights (applied in every mode, as on the SDK).
        enable_recompute: Whether the kernel recomputes the attention weights in backward (bf16 only; fp8 training
            refuses it, as the SDK fails there).

    Example:
        >>> import torch
        >>> import habana_frameworks.torch.hpex.experimental.transformer_engine as te
        >>> attention = te.FusedAttention(scale=None, attention_dropout=0.0, enable_recompute=False)
        >>> q = torch.randn(1, 2, 8, 16, device="hpu", dtype=torch.bfloat16)
        >>> with te.fp8_autocast(enabled=True):
        ...     out = attention(q, q, q, is_causal=True)  # doctest: +SKIP
    """

    def __init__(self, scale: float, attention_dropout: float, enable_recompute: bool) -> None:
        super().__init__()
        self.name = self.name + "_FusedAttention"
        self.enable_recompute = enable_recompute
        self.scale = scale
        self.attention_dropout = attention_dropout

    def get_fp8_weights_scratchpad(self, is_first_microbatch: bool | None) -> Any:
        """No weights in FusedAttention: ``None``."""
        return None

    def forward(  # type: ignore[override]  # the SDK's base declares forward(self)
        self,
        query_layer: torch.Tensor,
        key_layer: torch.Tensor,
        value_layer: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        softmax_mode: str = "None",
    ) -> Any:
        """Attention of ``query_layer`` over ``key_layer`` / ``value_layer``, in fp8 inside ``fp8_autocast``.

        Args:
            query_layer: ``[batch, heads, sequence, head_dim]``.
            key_layer: ``[batch, kv_heads, sequence, head_dim]`` (grouped-query attention when fewer heads).
            value_layer: As ``key_layer``.
            attention_mask: Added to (or, boolean, selecting) the scores.
            is_causal: A triangular mask (required in fp8 training, as on the SDK).
            softmax_mode: ``"None"``, ``"fast"`` or ``"fp32"`` (the emulator's softmax is exact in each).
        """
        if not FP8GlobalStateManager.is_fp8_enabled():
            with _hpu().sdp_kernel(enable_recompute=self.enable_recompute):
                return __getattr__("sdpa_kernel").apply(
                    query_layer,
                    key_layer,
                    value_layer,
                    attention_mask,
                    self.attention_dropout,
                    is_causal,
                    self.scale,
                    softmax_mode,
                )
        with self.prepare_forward(None, None, num_gemms=2) as (_, is_scale_update_required):
            # What this run records follows the emulated base's measuring rule (as Linear's forward).
            measure_state = {
                "fwd_enabled": bool(self.fp8_meta["update_amax_fwd"]["fwd_enabled"]),
                "bwd_enabled": bool(self.fp8_meta["update_amax_bwd"]),
            }
            with _hpu().sdp_kernel(enable_recompute=self.enable_recompute):
                return FusedAttnFunc.apply(
                    query_layer,
                    key_layer,
                    value_layer,
                    attention_mask,
                    self.attention_dropout,
                    is_causal,
                    self.scale,
                    softmax_mode,
                    True,
                    self.fp8_meta,
                    measure_state,
                    is_scale_update_required,
                )
