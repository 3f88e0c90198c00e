"""Emulation of ``habana_frameworks.torch.hpex.kernels.FusedSDPA``: fused scaled-dot-product attention.

The SDK's ``FusedSDPA`` (gaudi-pytorch-bridge 1.19.0, ``hpex/kernels/FusedSDPA.py``) is an autograd function over
the TPC kernels ``torch.ops.hpu.sdpa_fwd`` / ``sdpa_bwd`` (it keeps the attention probabilities for backward) and
``sdpa_recomp_fwd`` / ``sdpa_recomp_bwd`` (it keeps the row max and inverse row sum and recomputes the
probabilities in backward, to save memory). The emulator has the same Python wrapper, argument checks and grouped
query attention reshapes, line for line, and computes the kernels with torch operations in float32
(``hpex/_fused_ops.py``); ``softmax_mode="fast"`` runs the same exact softmax (Gaudi's fast mode uses a cheaper
exponent in bf16, so Gaudi's results differ from the emulator's by more than rounding there).

``recompute_mode=None`` means the SDK's process-wide switch (``hpu.recompute_sdp_enabled()``), which is on unless a
program turns it off (``backend/helpers/runtime_config.cpp:33``); the emulator's ``hpu`` does not emulate that switch,
so ``None`` is recompute on. First-generation Gaudi has no fused attention kernel: there this refuses.

Example:
    >>> import torch
    >>> from habana_frameworks.torch.hpex.kernels import FusedSDPA
    >>> q = k = v = torch.randn(2, 4, 8, 16, device="hpu")
    >>> FusedSDPA.apply(q, k, v, None, 0.0, True).shape  # doctest: +SKIP
    torch.Size([2, 4, 8, 16])
"""

import os
import random
from typing import Any

import torch

from ... import hpu as ht  # noqa: F401  # the SDK's module has it (its recompute switch)
from ..._generation import generation as _generation
from .. import _fused_ops

__all__ = ["FusedSDPA"]


def check_dbg_env_var(v: str) -> bool:
    """Whether the environment variable ``v`` is ``1`` (the SDK's debug switches)."""
    return int(os.getenv(v, 0)) == 1


def is_gqa(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether ``q`` and ``k`` are grouped-query attention (more query heads than key heads, but more than one)."""
    if q.dim() != 4:
        return False
    return q.shape[1] != k.shape[1] and k.shape[1] != 1


def gqa_input_reshape_bwd(q: torch.Tensor, v: torch.Tensor, grad_in: torch.Tensor) -> torch.Tensor:
    """The output gradient in the grouped (5-d) layout of ``q``."""
    return grad_in.reshape((q.shape[0], q.shape[1], q.shape[2], q.shape[3], v.shape[-1]))


def gqa_input_reshape_fwd(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attention_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Group the query heads by key head: ``[b, groups, heads_per_group, s, d]``; keys and values get a 1 there."""
    q_heads, kv_heads = q.shape[1], k.shape[1]
    per_group = q_heads // kv_heads
    bs, _, seq_len, h_dim = q.shape
    q = q.reshape((bs, kv_heads, per_group, seq_len, h_dim))
    k = k.reshape((k.shape[0], kv_heads, 1, k.shape[2], k.shape[3]))
    v = v.reshape((v.shape[0], kv_heads, 1, v.shape[2], v.shape[3]))
    if attention_mask is not None:
        mask_bs, heads, seq_t, seq_s = attention_mask.shape
        if heads == q_heads:
            attention_mask = attention_mask.reshape((mask_bs, kv_heads, per_group, seq_t, seq_s))
        else:
            attention_mask = attention_mask.unsqueeze(1)
    return q, k, v, attention_mask


def gqa_output_reshape(tensor: torch.Tensor) -> torch.Tensor:
    """Back from the grouped layout to ``[b, heads, s, d]``."""
    bs, groups, heads_per_group, seq_len, h_dim = tensor.shape
    return tensor.reshape((bs, groups * heads_per_group, seq_len, h_dim))


def _refuse_on_first_generation() -> None:
    if _generation() == "gaudi":
        raise RuntimeError(
            "FusedSDPA needs the fused attention kernels of Gaudi2 or later; this is a first-generation Gaudi "
            "(LIGHTNING_ACCEL_EMULATE_HPU_TYPE=gaudi). Use torch.nn.functional.scaled_dot_product_attention there."
        )


def sdpa_fwd_wrapper(
    ctx: Any,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    softmax_mode: str = "None",
    recompute_mode: bool | None = None,
    valid_seq_len: torch.Tensor | None = None,
    seq_padding_type: str = "left",
    return_dropout_mask: bool = False,
    return_attn_probs: bool = False,
) -> Any:
    """The forward of :class:`FusedSDPA`, with the SDK's checks (``FusedSDPA.py:85-198``)."""
    _refuse_on_first_generation()
    requires_backward = q.requires_grad or k.requires_grad or v.requires_grad
    softmax_mode = softmax_mode.lower()
    seq_padding_type = seq_padding_type.lower()
    if scale is None:
        scale = _fused_ops.default_scale(q)
    # The SDK reads its process-wide switch here (ht.recompute_sdp_enabled()); its default is on.
    recompute = True if recompute_mode is None else recompute_mode
    if return_attn_probs:
        assert not requires_backward, "return_attn_probs is supported only for inference mode"
        recompute = False
    if recompute and requires_backward and softmax_mode == "fast":
        assert is_causal, (
            "Optimized softmax mode is supported in recompute training mode only in causal(triangular) mask case"
        )
    if valid_seq_len is not None:
        assert is_causal and not requires_backward and attn_mask is None, (
            "Valid sequence length is supported only in inference with is_causal(triangular) mask case"
        )
        raise NotImplementedError(
            "FusedSDPA with valid_seq_len (padded inference batches) is not emulated; leave it None and pass an "
            "attention mask instead."
        )
    if recompute:
        assert not return_dropout_mask, "Return_dropout_mask is not supported in recompute mode"

    gqa = is_gqa(q, k)
    if gqa:
        q, k, v, attn_mask = gqa_input_reshape_fwd(q, k, v, attn_mask)
    seed = random.getrandbits(62) if dropout_p > 0.0 else 0
    out, m, linv, mask, probs = _fused_ops.sdpa_forward(q, k, v, attn_mask, dropout_p, scale, is_causal, seed)
    if gqa:
        out = gqa_output_reshape(out)
    if not requires_backward:
        probs_out = probs.to(q.dtype)
        if gqa:
            mask = gqa_output_reshape(mask) if mask is not None else None
            probs_out = gqa_output_reshape(probs_out)
        if return_dropout_mask:
            return (out, probs_out, mask) if return_attn_probs else (out, mask)
        return (out, probs_out) if return_attn_probs else out
    if recompute:
        # The recompute kernel keeps m and linv (and the seed of its dropout mask), never the probabilities.
        ctx.save_for_backward(q, k, v, attn_mask, m, linv)
        ctx.seed, ctx.probs_shape = seed, probs.shape
    else:
        ctx.save_for_backward(q, k, v, attn_mask, probs, mask)
    ctx.dropout_p = dropout_p
    ctx.scale = scale
    ctx.is_causal = is_causal
    ctx.recompute = recompute
    ctx.gqa = gqa
    ctx.softmax_mode = softmax_mode
    if recompute or not return_dropout_mask:
        return out
    if mask is not None and gqa:
        mask = gqa_output_reshape(mask)
    return out, mask


def sdpa_bwd_wrapper(ctx: Any, dout: torch.Tensor, *args: Any) -> tuple[Any, ...]:
    """The backward of :class:`FusedSDPA`: gradients of q, k and v, ``None`` for the other arguments."""
    if ctx.recompute:
        q, k, v, attn_mask, m, linv = ctx.saved_tensors
        mask = None
        if ctx.dropout_p > 0.0:
            mask = _fused_ops.dropout_mask(ctx.probs_shape, ctx.dropout_p, ctx.seed, q.device)
        probs = None
    else:
        q, k, v, attn_mask, probs, mask = ctx.saved_tensors
        m = linv = None
    if ctx.gqa:
        dout = gqa_input_reshape_bwd(q, v, dout)
    dq, dk, dv = _fused_ops.sdpa_backward(
        dout, q, k, v, attn_mask, m, linv, mask, ctx.dropout_p, ctx.scale, ctx.is_causal, probs=probs
    )
    if ctx.gqa:
        dq, dk, dv = gqa_output_reshape(dq), gqa_output_reshape(dk), gqa_output_reshape(dv)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None


class FusedSDPA(torch.autograd.Function):
    """The SDK's fused scaled-dot-product attention, ``FusedSDPA.apply(q, k, v, attn_mask, dropout_p, is_causal, ...)``.

    Arguments after ``v`` are positional in ``apply`` (an autograd function): ``attn_mask``, ``dropout_p``,
    ``is_causal``, ``scale``, ``softmax_mode`` (``"None"`` or ``"fast"``), ``recompute_mode`` (``None``: on),
    ``valid_seq_len`` (not emulated), ``seq_padding_type``, ``return_dropout_mask``, ``return_attn_probs``.

    Example:
        >>> import torch
        >>> from habana_frameworks.torch.hpex.kernels import FusedSDPA
        >>> q = torch.randn(1, 2, 4, 8, device="hpu", requires_grad=True)
        >>> FusedSDPA.apply(q, q, q, None, 0.0, True, None, "None", False).sum().backward()  # doctest: +SKIP
    """

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        softmax_mode: str = "None",
        recompute_mode: bool | None = None,
        valid_seq_len: torch.Tensor | None = None,
        seq_padding_type: str = "left",
        return_dropout_mask: bool = False,
        return_attn_probs: bool = False,
    ) -> Any:
        return sdpa_fwd_wrapper(
            ctx,
            q,
            k,
            v,
            attn_mask=attn_mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
            softmax_mode=softmax_mode,
            recompute_mode=recompute_mode,
            valid_seq_len=valid_seq_len,
            seq_padding_type=seq_padding_type,
            return_dropout_mask=return_dropout_mask,
            return_attn_probs=return_attn_probs,
        )

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor, *args: Any) -> Any:
        return sdpa_bwd_wrapper(ctx, dout, *args)
