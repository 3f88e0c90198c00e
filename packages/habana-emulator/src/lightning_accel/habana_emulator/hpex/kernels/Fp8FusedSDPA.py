"""Emulation of ``habana_frameworks.torch.hpex.kernels.Fp8FusedSDPA``: fused attention on fp8 q, k and v.

The SDK's wrapper (gaudi-pytorch-bridge bcc5172, ``hpex/kernels/Fp8FusedSDPA.py``) hands fp8 ``q``, ``k``, ``v`` and
their inverse scales (``d_scale_q`` ...) to the TPC kernels ``torch.ops.hpu.fp8_sdpa_fwd`` (it keeps the
probabilities for backward) or ``fp8_sdpa_recomp_fwd`` (it keeps the row max and inverse row sum), and asks them for
the amax of the softmax output S (``is_amax_s``), which the Transformer Engine's ``FusedAttention`` records for the
scale of S. The emulator keeps the wrapper's rules, rule by rule with the SDK's words (``Fp8FusedSDPA.py:111-144``
at bcc5172): in training only a causal mask (``"Fp8 FusedSDPA in training only supports Triangular mask"``) and the
process-wide recompute switch (``hpu.recompute_sdp_enabled()``) unless ``recompute`` is given; inference always takes
the recompute variant; an empty inference call returns an uninitialised output; grouped-query reshapes; what each
variant returns and keeps for backward.

Numerics (the emulator's, not the hardware kernel's): q, k and v are dequantized exactly (their fp8 values times
``d_scale_*``, in float32), and the attention is the emulated ``FusedSDPA``'s float32 computation (``hpex/_fused_ops``)
on those values, returned in bf16. Gaudi's kernel also quantizes S to fp8 (``q_scale_s``) before its product with v
and computes in its own order; the emulator does not, so its output is that of bf16 attention on the
quantize-dequantized inputs. The amax of S is the largest softmax probability (before dropout).

Not emulated (refused by name): ``valid_seq_len`` (padded inference batches), ``window_size`` / ``sink`` (the
recompute kernel's sliding window and attention sinks), and the fp8 output and its amax (``q_scale_o``,
``is_amax_o``) or an fp8 S fed in (``d_scale_s``), whose kernel semantics the published sources do not give.

Example:
    >>> import torch
    >>> from habana_frameworks.torch.hpex.kernels import fp8_fused_sdpa
    >>> q = torch.randn(1, 2, 4, 8, device="hpu").to(torch.float8_e4m3fn)
    >>> out, amax_s, _ = fp8_fused_sdpa(q, q, q, is_causal=True, is_amax_s=True)  # doctest: +SKIP
"""

from __future__ import annotations

import random
from typing import Any

import torch

from ... import hpu as ht  # the SDK's module has it (its recompute switch)
from .. import _fused_ops
from .FusedSDPA import check_dbg_env_var as check_dbg_env_var
from .FusedSDPA import gqa_input_reshape_bwd as gqa_input_reshape_bwd
from .FusedSDPA import gqa_input_reshape_fwd as gqa_input_reshape_fwd
from .FusedSDPA import gqa_output_reshape as gqa_output_reshape
from .FusedSDPA import is_gqa as is_gqa

__all__ = ["Fp8FusedSDPA", "fp8_fused_sdpa", "fp8_sdpa_bwd_wrapper", "fp8_sdpa_fwd_wrapper"]

# Read once at load, as the SDK does (Fp8FusedSDPA.py:83 at bcc5172): the forward then returns the dropout mask.
dbg_env_var_fsdpa = check_dbg_env_var("FSDPA_DBG_USE_DROPOUT_STUB")

# The backward returns one gradient per input of Fp8FusedSDPA.forward: q, k, v and none for the 19 others.
_NO_GRADS = (None,) * 19


def _not_emulated(argument: str, given: str, why: str, default: str) -> NotImplementedError:
    return NotImplementedError(
        f"fp8_sdpa_fwd_wrapper with {argument}={given} is not emulated: {why}. Leave {argument} at {default} under "
        "emulation (LIGHTNING_ACCEL_EMULATE=hpu)."
    )


def _values(tensor: torch.Tensor, d_scale: Any) -> torch.Tensor:
    """The float32 numbers an fp8 tensor stands for: its values times its inverse scale (1 when there is none)."""
    values = tensor.float()
    return values if d_scale is None else values * d_scale


def _refuse_not_emulated(
    q_scale_o: Any, d_scale_s: Any, is_amax_o: bool, valid_seq_len: Any, window_size: Any, sink: Any
) -> None:
    if valid_seq_len is not None:
        raise _not_emulated("valid_seq_len", "<a tensor>", "padded inference batches (pass a mask instead)", "None")
    if tuple(window_size) != (-1, -1):
        raise _not_emulated("window_size", repr(window_size), "the recompute kernel's sliding window", "(-1, -1)")
    if sink is not None:
        raise _not_emulated("sink", "<a tensor>", "the recompute kernel's attention sinks", "None")
    if q_scale_o is not None or is_amax_o:
        given, name = ("<a tensor>", "q_scale_o") if q_scale_o is not None else ("True", "is_amax_o")
        raise _not_emulated(name, given, "the kernel's fp8 output, whose rounding is not published", "its default")
    if d_scale_s is not None:
        raise _not_emulated("d_scale_s", "<a tensor>", "the kernel's fp8 softmax input scale", "None")


def fp8_sdpa_fwd_wrapper(
    ctx: Any,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    softmax_mode: str = "None",
    d_scale_q: torch.Tensor | None = None,
    d_scale_k: torch.Tensor | None = None,
    d_scale_v: torch.Tensor | None = None,
    q_scale_s: torch.Tensor | None = None,
    q_scale_o: torch.Tensor | None = None,
    d_scale_s: torch.Tensor | None = None,
    is_amax_s: bool = False,
    is_amax_o: bool = False,
    valid_seq_len: torch.Tensor | None = None,
    seq_padding_type: str = "left",
    recompute: bool | None = None,
    requires_grad: bool | None = None,
    window_size: tuple[int, int] = (-1, -1),
    sink: torch.Tensor | None = None,
) -> Any:
    """The forward of :class:`Fp8FusedSDPA`, with the SDK's checks, choice of variant and outputs (bcc5172).

    Returns:
        In inference ``(out, amax_s, amax_o)``; in training ``(out, m, linv, seed, amax_s, amax_o)`` with the
        recompute variant, else ``(out, amax_s, amax_o)`` (``(out, dropout_mask)`` with ``FSDPA_DBG_USE_DROPOUT_STUB``).
        ``out`` is bf16; ``amax_s`` is ``None`` unless ``is_amax_s``; ``amax_o`` is always ``None``.
    """
    requires_backward = (
        (q.requires_grad or k.requires_grad or v.requires_grad) if requires_grad is None else requires_grad
    )
    if not requires_backward and (q.numel() == 0 or k.numel() == 0 or v.numel() == 0):
        # As the SDK (Fp8FusedSDPA.py:116-123): an empty inference call gives an uninitialised output, no kernel.
        dtype = q.dtype if q_scale_o is not None else torch.bfloat16
        return q.new_empty((*q.shape[:-1], v.shape[-1]), dtype=dtype)
    softmax_mode = softmax_mode.lower()
    if scale is None:
        scale = _fused_ops.default_scale(q)
    if requires_backward:
        if not is_causal:
            raise AssertionError("Fp8 FusedSDPA in training only supports Triangular mask")
        if recompute is None:
            recompute = ht.recompute_sdp_enabled()
    else:
        recompute = True
    if valid_seq_len is not None and not is_causal and requires_backward is False:
        raise AssertionError(
            "Valid sequence length is supported only in inference with is_causal(triangular) mask case"
        )
    _refuse_not_emulated(q_scale_o, d_scale_s, is_amax_o, valid_seq_len, window_size, sink)

    gqa = is_gqa(q, k)
    if gqa:
        q, k, v, attn_mask = gqa_input_reshape_fwd(q, k, v, attn_mask)
    seed = random.getrandbits(62) if dropout_p > 0.0 else 0
    out, m, linv, dm, probs = _fused_ops.sdpa_forward(
        _values(q, d_scale_q),
        _values(k, d_scale_k),
        _values(v, d_scale_v),
        attn_mask,
        dropout_p,
        scale,
        is_causal,
        seed,
    )
    out = out.to(torch.bfloat16)
    amax_s = probs.amax().reshape(1) if is_amax_s else None
    if gqa:
        out = gqa_output_reshape(out)
    if not requires_backward:
        return out, amax_s, None
    seed_tensor = torch.tensor([seed], dtype=torch.int64, device=q.device)
    if recompute:
        ctx.save_for_backward(q, k, v, attn_mask, m, linv, seed_tensor, out)
    else:
        ctx.save_for_backward(q, k, v, probs, dm, out)
    # The saved q, k, v are fp8: their inverse scales say what they stand for in backward.
    ctx.d_scales = (d_scale_q, d_scale_k, d_scale_v)
    ctx.probs_shape = probs.shape
    ctx.dropout_p = dropout_p
    ctx.scale = scale
    ctx.is_causal = is_causal
    ctx.recompute = recompute
    ctx.gqa = gqa
    ctx.softmax_mode = softmax_mode
    if recompute:
        return out, m, linv, seed_tensor, amax_s, None
    if not dbg_env_var_fsdpa:
        return out, amax_s, None
    return out, (gqa_output_reshape(dm) if gqa and dm is not None else dm)


def _fp8_sdpa_fwd_wrapper_1_18(
    ctx: Any,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    softmax_mode: str = "None",
    d_scale_q: torch.Tensor | None = None,
    d_scale_k: torch.Tensor | None = None,
    d_scale_v: torch.Tensor | None = None,
    q_scale_s: torch.Tensor | None = None,
    q_scale_o: torch.Tensor | None = None,
    d_scale_s: torch.Tensor | None = None,
    is_amax_s: bool = False,
    is_amax_o: bool = False,
    valid_seq_len: torch.Tensor | None = None,
    seq_padding_type: str = "left",
) -> Any:
    """The wrapper as the Transformer Engine of 1.18.0 imports it: three outputs in every variant.

    At 1.18.0 (``hpex/kernels/Fp8FusedSDPA.py:80-192``) the wrapper reads whether to train from ``q``, ``k``, ``v``,
    takes the process-wide recompute switch in inference too and returns ``(out, amax_s, amax_o)`` from each
    variant; the emulator's FusedAttention (a 1.18.0 layer) calls it so. The kernel computation is
    :func:`fp8_sdpa_fwd_wrapper`'s.
    """
    requires_backward = q.requires_grad or k.requires_grad or v.requires_grad
    if requires_backward and not is_causal:
        raise AssertionError("Fp8 FusedSDPA in trining only supports Triangular mask")  # sic, 1.18.0 line 112
    if valid_seq_len is not None and not (is_causal and not requires_backward and attn_mask is None):
        raise AssertionError(
            "Valid sequence length is supported only in inference with is_causal(triangular) mask case"
        )
    outputs = fp8_sdpa_fwd_wrapper(
        ctx,
        q,
        k,
        v,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
        softmax_mode=softmax_mode,
        d_scale_q=d_scale_q,
        d_scale_k=d_scale_k,
        d_scale_v=d_scale_v,
        q_scale_s=q_scale_s,
        q_scale_o=q_scale_o,
        d_scale_s=d_scale_s,
        is_amax_s=is_amax_s,
        is_amax_o=is_amax_o,
        valid_seq_len=valid_seq_len,
        seq_padding_type=seq_padding_type,
        recompute=ht.recompute_sdp_enabled(),
        requires_grad=requires_backward,
    )
    if isinstance(outputs, torch.Tensor):  # an empty inference call
        return outputs, None, None
    if len(outputs) == 6:  # the recompute variant in training: 1.18.0 returns its output and amaxes only
        out, _, _, _, amax_s, amax_o = outputs
        return out, amax_s, amax_o
    return outputs


def _backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of q, k, v (float32, in ``[b, heads, s, d]``) and ``dS`` from the values ``dout`` stands for.

    The emulator's share of ``sdpa_bwd`` / ``sdpa_recomp_bwd`` / ``fp8_sdpa_bwd`` on the forward's saved tensors: the
    fp8 q, k, v are dequantized with the forward's inverse scales, the probabilities are the kept ones or rebuilt.
    """
    d_scale_q, d_scale_k, d_scale_v = ctx.d_scales
    if ctx.recompute:
        q, k, v, attn_mask, m, linv, seed, _ = ctx.saved_tensors
        mask = None
        if ctx.dropout_p > 0.0:
            mask = _fused_ops.dropout_mask(ctx.probs_shape, ctx.dropout_p, int(seed.item()), q.device)
        probs = None
    else:
        q, k, v, probs, mask, _ = ctx.saved_tensors
        attn_mask = m = linv = None
    if ctx.gqa:
        dout = gqa_input_reshape_bwd(q, v, dout)
    dq, dk, dv, dscores = _fused_ops.sdpa_backward_scores(
        dout.float(),
        _values(q, d_scale_q),
        _values(k, d_scale_k),
        _values(v, d_scale_v),
        attn_mask,
        m,
        linv,
        mask,
        ctx.dropout_p,
        ctx.scale,
        ctx.is_causal,
        probs=probs,
    )
    if ctx.gqa:
        dq, dk, dv = gqa_output_reshape(dq), gqa_output_reshape(dk), gqa_output_reshape(dv)
    return dq, dk, dv, dscores


def fp8_sdpa_bwd_wrapper(ctx: Any, dout: torch.Tensor, *args: Any) -> tuple[Any, ...]:
    """The backward of :class:`Fp8FusedSDPA`: bf16 gradients of q, k and v (as the SDK's bf16 backward kernels)."""
    dq, dk, dv, _ = _backward(ctx, dout)
    return (dq.to(dout.dtype), dk.to(dout.dtype), dv.to(dout.dtype), *_NO_GRADS)


class Fp8FusedSDPA(torch.autograd.Function):
    """The SDK's fp8 fused attention as an autograd function; arguments as :func:`fp8_sdpa_fwd_wrapper`'s."""

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
        d_scale_q: torch.Tensor | None = None,
        d_scale_k: torch.Tensor | None = None,
        d_scale_v: torch.Tensor | None = None,
        q_scale_s: torch.Tensor | None = None,
        q_scale_o: torch.Tensor | None = None,
        d_scale_s: torch.Tensor | None = None,
        is_amax_s: bool = False,
        is_amax_o: bool = False,
        valid_seq_len: torch.Tensor | None = None,
        seq_padding_type: str = "left",
        recompute: bool | None = None,
        requires_grad: bool | None = None,
        window_size: tuple[int, int] = (-1, -1),
        sink: torch.Tensor | None = None,
    ) -> Any:
        return fp8_sdpa_fwd_wrapper(
            ctx,
            q,
            k,
            v,
            attn_mask=attn_mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
            softmax_mode=softmax_mode,
            d_scale_q=d_scale_q,
            d_scale_k=d_scale_k,
            d_scale_v=d_scale_v,
            q_scale_s=q_scale_s,
            q_scale_o=q_scale_o,
            d_scale_s=d_scale_s,
            is_amax_s=is_amax_s,
            is_amax_o=is_amax_o,
            valid_seq_len=valid_seq_len,
            seq_padding_type=seq_padding_type,
            recompute=recompute,
            requires_grad=requires_grad,
            window_size=window_size,
            sink=sink,
        )

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor, *args: Any) -> Any:
        return fp8_sdpa_bwd_wrapper(ctx, dout, *args)


def dump_api_params(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    softmax_mode: str = "None",
    d_scale_q: torch.Tensor | None = None,
    d_scale_k: torch.Tensor | None = None,
    d_scale_v: torch.Tensor | None = None,
    q_scale_s: torch.Tensor | None = None,
    q_scale_o: torch.Tensor | None = None,
    d_scale_s: torch.Tensor | None = None,
    is_amax_s: bool = False,
    is_amax_o: bool = False,
    valid_seq_len: torch.Tensor | None = None,
    seq_padding_type: str = "left",
    recompute: bool | None = None,
    requires_grad: bool | None = None,
    window_size: tuple[int, int] = (-1, -1),
    sink: torch.Tensor | None = None,
) -> None:
    """With ``PT_HPU_DUMP_FUSED_SDPA_API_PARAMS=1``, print the arguments (shapes of tensors, values of scales)."""
    if not check_dbg_env_var("PT_HPU_DUMP_FUSED_SDPA_API_PARAMS"):
        return
    print("=" * 40, "FUSED_SDPA_API_PARAMS", "=" * 40)
    for name, tensor in (("q", q), ("k", k), ("v", v), ("attn_mask", attn_mask)):
        _print_tensor(name, tensor, values=False)
    for name, value in (("dropout_p", dropout_p), ("is_causal", is_causal), ("scale", scale)):
        print(f"{name} : ", value)
    print("softmax_mode : ", softmax_mode)
    for name, tensor in (
        ("d_scale_q", d_scale_q),
        ("d_scale_k", d_scale_k),
        ("d_scale_v", d_scale_v),
        ("q_scale_s", q_scale_s),
        ("q_scale_o", q_scale_o),
        ("d_scale_s", d_scale_s),
    ):
        _print_tensor(name, tensor, values=True)
    print("is_amax_s : ", is_amax_s)
    print("is_amax_o : ", is_amax_o)
    _print_tensor("valid_seq_len", valid_seq_len, values=False)
    print("seq_padding_type : ", seq_padding_type)
    print("recmpute : ", recompute)  # sic, the SDK's label
    print("requires_grad : ", requires_grad)
    print("=" * 90)
    print(f"window size wl: {window_size[0]} wr: {window_size[1]}")
    _print_tensor("sink", sink, values=False)


def _print_tensor(name: str, tensor: torch.Tensor | None, values: bool) -> None:
    # The SDK prints a scale's values and another tensor's shape.
    if tensor is None:
        print(name, " is None")
    else:
        print(name, " : ", tensor.to("cpu") if values else tensor.shape)


def fp8_fused_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    softmax_mode: str = "None",
    d_scale_q: torch.Tensor | None = None,
    d_scale_k: torch.Tensor | None = None,
    d_scale_v: torch.Tensor | None = None,
    q_scale_s: torch.Tensor | None = None,
    q_scale_o: torch.Tensor | None = None,
    d_scale_s: torch.Tensor | None = None,
    is_amax_s: bool = False,
    is_amax_o: bool = False,
    valid_seq_len: torch.Tensor | None = None,
    seq_padding_type: str = "left",
    recompute: bool | None = None,
    requires_grad: bool | None = None,
    window_size: tuple[int, int] = (-1, -1),
    sink: torch.Tensor | None = None,
) -> Any:
    """Fp8 fused attention: :class:`Fp8FusedSDPA`'s outputs (see :func:`fp8_sdpa_fwd_wrapper`)."""
    arguments = (
        q,
        k,
        v,
        attn_mask,
        dropout_p,
        is_causal,
        scale,
        softmax_mode,
        d_scale_q,
        d_scale_k,
        d_scale_v,
        q_scale_s,
        q_scale_o,
        d_scale_s,
        is_amax_s,
        is_amax_o,
        valid_seq_len,
        seq_padding_type,
        recompute,
        requires_grad,
        window_size,
        sink,
    )
    dump_api_params(*arguments)
    return Fp8FusedSDPA.apply(*arguments)
