"""Emulation of ``habana_frameworks.torch.hpex.kernels.FusedSDPA``: fused scaled-dot-product attention.

The SDK's ``FusedSDPA`` (gaudi-pytorch-bridge bcc5172, ``hpex/kernels/FusedSDPA.py``) is an autograd function over
the TPC kernels ``torch.ops.hpu.sdpa_fwd`` / ``sdpa_bwd`` (it keeps the attention probabilities for backward) and
``sdpa_recomp_fwd`` / ``sdpa_recomp_bwd`` (it keeps the row max and inverse row sum and recomputes the
probabilities in backward, to save memory). The emulator has the same Python wrapper (its argument checks, the
choice of variant, grouped query attention reshapes, 2-d masks, the empty output of an empty inference call) and
computes the kernels with torch operations in float32 (``hpex/_fused_ops.py``): ``softmax_mode="fp32"`` (bf16 inputs
only, as on the SDK) is that computation; ``softmax_mode="fast"`` runs the same exact softmax (Gaudi's fast mode uses
a cheaper exponent in bf16, so Gaudi's results differ from the emulator's by more than rounding there).

``recompute_mode=None`` means the SDK's process-wide switch, ``hpu.recompute_sdp_enabled()`` (on unless a program
turns it off, or inside ``hpu.sdp_kernel(enable_recompute=False)``); in inference a single query row takes the
recompute variant, and ``return_attn_probs=True`` the other, whatever was asked, as on the SDK.

Not emulated (refused by name): ``valid_seq_len`` (padded inference batches), and ``window_size`` / ``sink``, new at
bcc5172, which the SDK hands to the recompute kernel only (a sliding attention window and attention sinks whose
exact semantics the kernel's published sources do not give).

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

from ... import hpu as ht  # the SDK's module has it (its recompute switch)
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


def _not_emulated(argument: str, given: str, why: str, default: str) -> NotImplementedError:
    return NotImplementedError(
        f"FusedSDPA with {argument}={given} is not emulated: {why}. Leave {argument} at {default} under emulation "
        "(LIGHTNING_ACCEL_EMULATE=hpu)."
    )


def _expand_2d_mask(attn_mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    # As the SDK: a (query length, key length) mask becomes (batch, 1..., query length, key length).
    assert attn_mask.shape[0] == q.shape[-2] and attn_mask.shape[1] == k.shape[-2], (
        "unsupported 2D attention mask, the shape is not (Nt, Ns)"
    )
    shape = [q.shape[0], *([1] * max(q.dim() - 3, 0)), attn_mask.shape[0], attn_mask.shape[1]]
    return attn_mask.expand(shape)


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
    window_size: tuple[int, int] = (-1, -1),
    sink: torch.Tensor | None = None,
) -> Any:
    """The forward of :class:`FusedSDPA`, with the SDK's checks and choice of variant (bcc5172)."""
    requires_backward = q.requires_grad or k.requires_grad or v.requires_grad
    if not requires_backward and (q.numel() == 0 or k.numel() == 0 or v.numel() == 0):
        # As the SDK: an empty inference call gives an (uninitialised) output of the right shape, no kernel.
        return q.new_empty((*q.shape[:-1], v.shape[-1]))
    softmax_mode = softmax_mode.lower()
    seq_padding_type = seq_padding_type.lower()
    if scale is None:
        scale = _fused_ops.default_scale(q)
    recompute = ht.recompute_sdp_enabled() if recompute_mode is None else recompute_mode
    if not requires_backward:
        # The SDK picks the variant in inference: one query row recomputes, returned probabilities need the other.
        if q.size(-2) == 1:
            recompute = True
        if return_attn_probs:
            recompute = False
    if return_attn_probs and requires_backward:
        raise AssertionError("return_attn_probs is supported only for inference mode")
    if recompute and requires_backward and softmax_mode == "fast" and not is_causal:
        raise AssertionError(
            "Optimized softmax mode is supported in recompute training mode only in causal(triangular) mask case"
        )
    if valid_seq_len is not None and not is_causal and not requires_backward:
        raise AssertionError(
            "Valid sequence length is supported only in inference with is_causal(triangular) mask case"
        )
    if recompute and return_dropout_mask:
        raise AssertionError("Return_dropout_mask is not supported in recompute mode")
    if softmax_mode == "fp32" and q.dtype != torch.bfloat16:
        raise AssertionError("softmax_mode = fp32 is supported only when q/k/v inputs are BF16")
    if valid_seq_len is not None:
        raise _not_emulated(
            "valid_seq_len", "<a tensor>", "padded inference batches (pass an attention mask instead)", "None"
        )
    if tuple(window_size) != (-1, -1):
        raise _not_emulated(
            "window_size",
            repr(window_size),
            "the recompute kernel's sliding attention window, whose semantics are not published",
            "(-1, -1)",
        )
    if sink is not None:
        raise _not_emulated(
            "sink", "<a tensor>", "the recompute kernel's attention sinks, whose semantics are not published", "None"
        )
    if attn_mask is not None and attn_mask.dim() == 2:
        attn_mask = _expand_2d_mask(attn_mask, q, k)

    gqa = is_gqa(q, k)
    if gqa:
        q, k, v, attn_mask = gqa_input_reshape_fwd(q, k, v, attn_mask)
    seed = random.getrandbits(62) if dropout_p > 0.0 else 0
    out, m, linv, mask, probs = _fused_ops.sdpa_forward(q, k, v, attn_mask, dropout_p, scale, is_causal, seed)
    if gqa:
        out = gqa_output_reshape(out)
    if not requires_backward:
        if recompute:
            return out  # the recompute kernel gives neither probabilities nor a dropout mask
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
    # One gradient per input of forward: q, k, v, then none for its twelve other arguments.
    return (dq, dk, dv, *([None] * 12))


class FusedSDPA(torch.autograd.Function):
    """The SDK's fused scaled-dot-product attention, ``FusedSDPA.apply(q, k, v, attn_mask, dropout_p, is_causal, ...)``.

    Arguments after ``v`` are positional in ``apply`` (an autograd function): ``attn_mask``, ``dropout_p``,
    ``is_causal``, ``scale``, ``softmax_mode`` (``"None"``, ``"fast"`` or ``"fp32"``), ``recompute_mode``
    (``None``: ``hpu.recompute_sdp_enabled()``), ``valid_seq_len`` (not emulated), ``seq_padding_type``,
    ``return_dropout_mask``, ``return_attn_probs``, ``window_size`` and ``sink`` (not emulated beyond their defaults).

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
        window_size: tuple[int, int] = (-1, -1),
        sink: torch.Tensor | None = None,
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
            window_size=window_size,
            sink=sink,
        )

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor, *args: Any) -> Any:
        return sdpa_bwd_wrapper(ctx, dout, *args)
