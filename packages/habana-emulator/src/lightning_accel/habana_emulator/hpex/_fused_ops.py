"""The arithmetic of the SDK's fused TPC kernels behind ``hpex``, written with plain torch operations.

On Gaudi each of these is one C++ kernel (``torch.ops.hpu.*`` / ``_hpex_C.*``, gaudi-pytorch-bridge 1.19.0). The
emulator runs the same formulas, one torch operation at a time, on the ``"hpu"`` device: the results follow torch's
arithmetic (float32 accumulation where noted), not the TPC kernels' instruction order, so they match Gaudi within
rounding, not bit for bit (docs/emulator.md, fused kernels).
"""

from __future__ import annotations

import math

import torch

__all__: list[str] = []


def adamw(
    grads: list[torch.Tensor],
    weights: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    neg_step: float,
    beta1: float,
    beta2: float,
    eps: float,
    modified_wd: float,
) -> None:
    """``optimizer_adamw``: bias correction folded into ``neg_step``, eps added to ``sqrt(v)`` before it."""
    with torch.no_grad():
        for grad, weight, exp_avg, exp_avg_sq in zip(grads, weights, exp_avgs, exp_avg_sqs, strict=True):
            exp_avg.mul_(beta1).add_(grad.to(exp_avg.dtype), alpha=1.0 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad.to(exp_avg_sq.dtype), grad.to(exp_avg_sq.dtype), value=1.0 - beta2)
            if modified_wd != 1.0:
                weight.mul_(modified_wd)
            update = exp_avg.float() / (exp_avg_sq.float().sqrt() + eps)
            weight.add_(update.to(weight.dtype), alpha=neg_step)


def sgd(
    grads: list[torch.Tensor],
    weights: list[torch.Tensor],
    momentum_buffers: list[torch.Tensor] | None,
    first_step: bool,
    lr: float,
    weight_decay: float,
    momentum: float,
    dampening: float,
    nesterov: bool,
) -> None:
    """``optimizer_sgd`` / ``optimizer_sgd_momentum``: torch.optim.SGD's update (the buffer starts as the gradient)."""
    with torch.no_grad():
        for index, (grad, weight) in enumerate(zip(grads, weights, strict=True)):
            d_p = grad.add(weight, alpha=weight_decay) if weight_decay != 0 else grad
            if momentum_buffers is not None:
                buf = momentum_buffers[index]
                if first_step:
                    buf.copy_(d_p)
                else:
                    buf.mul_(momentum).add_(d_p, alpha=1.0 - dampening)
                d_p = d_p.add(buf, alpha=momentum) if nesterov else buf
            weight.add_(d_p, alpha=-lr)


def adagrad(
    grads: list[torch.Tensor],
    weights: list[torch.Tensor],
    sums: list[torch.Tensor],
    step: int,
    lr: float,
    weight_decay: float,
    lr_decay: float,
    eps: float,
) -> None:
    """``fused_adagrad``: torch.optim.Adagrad's update, the learning rate decayed by ``1 + (step - 1) * lr_decay``."""
    clr = lr / (1.0 + (step - 1) * lr_decay)
    with torch.no_grad():
        for grad, weight, state_sum in zip(grads, weights, sums, strict=True):
            g = grad.add(weight, alpha=weight_decay) if weight_decay != 0 else grad
            state_sum.addcmul_(g, g, value=1.0)
            weight.addcdiv_(g, state_sum.sqrt().add_(eps), value=-clr)


def global_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all ``grads`` together, accumulated in float32."""
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))


def clip_norm(grads: list[torch.Tensor], max_norm: torch.Tensor) -> torch.Tensor:
    """``fused_clip_norm``: scale ``grads`` in place when their total L2 norm exceeds ``max_norm``; the norm.

    The coefficient is torch's (``clip_grad_norm_``): ``max_norm / (norm + 1e-6)``, clamped at 1.
    """
    with torch.no_grad():
        total = global_norm(grads)
        coef = torch.clamp(max_norm.float().reshape(()) / (total + 1e-6), max=1.0)
        for grad in grads:
            grad.mul_(coef.to(grad.dtype))
    return total


def lamb_phase1(
    grads: list[torch.Tensor],
    weights: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    clip_divisor: torch.Tensor,
    grad_averaging: bool,
    beta1: float,
    beta2: float,
    eps: float,
    bias_correction1: float,
    bias_correction2: float,
    weight_decay: float,
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """``optimizer_lamb_phase1``: Adam moments of the clipped gradient; the per-tensor update and both norms."""
    updates, weight_norms, update_norms = [], [], []
    with torch.no_grad():
        for grad, weight, exp_avg, exp_avg_sq in zip(grads, weights, exp_avgs, exp_avg_sqs, strict=True):
            g = grad.float() / clip_divisor.float().reshape(())
            exp_avg.mul_(beta1).add_(g.to(exp_avg.dtype), alpha=(1.0 - beta1) if grad_averaging else 1.0)
            exp_avg_sq.mul_(beta2).addcmul_(g.to(exp_avg_sq.dtype), g.to(exp_avg_sq.dtype), value=1.0 - beta2)
            m_hat = exp_avg.float() / bias_correction1
            v_hat = exp_avg_sq.float() / bias_correction2
            update = m_hat / (v_hat.sqrt() + eps)
            if weight_decay != 0:
                update = update + weight_decay * weight.float()
            updates.append(update)
            weight_norms.append(torch.linalg.vector_norm(weight.float()))
            update_norms.append(torch.linalg.vector_norm(update))
    return updates, weight_norms, update_norms


def lamb_phase2(
    weights: list[torch.Tensor],
    update_norms: list[torch.Tensor],
    weight_norms: list[torch.Tensor],
    updates: list[torch.Tensor],
    neg_lr: float,
    weight_decay: float,
    use_lamb: bool,
) -> None:
    """``optimizer_lamb_phase2``: the trust ratio ``norm(w) / norm(update)`` (1 where a norm is 0, or it is off)."""
    with torch.no_grad():
        for weight, u_norm, w_norm, update in zip(weights, update_norms, weight_norms, updates, strict=True):
            if weight_decay != 0 or use_lamb:
                ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
            else:
                ratio = torch.ones_like(w_norm)
            weight.add_((update * ratio * neg_lr).to(weight.dtype))


def lamb_divisor(grads: list[torch.Tensor], max_grad_norm: float) -> torch.Tensor:
    """``optimizer_lamb_fused_norm``: what the gradients are divided by, ``max(norm / max_grad_norm, 1)``."""
    total = global_norm(grads)
    return torch.clamp(total / max_grad_norm, min=1.0).reshape(1)


def _broadcast_back(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum ``grad`` over the dimensions that were broadcast from ``shape`` (grouped / multi-query K and V)."""
    dims = [i for i, (g, s) in enumerate(zip(grad.shape, shape, strict=True)) if s == 1 and g != 1]
    return grad.sum(dim=dims, keepdim=True) if dims else grad


def _scores(
    q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None, scale: float, is_causal: bool
) -> torch.Tensor:
    scores = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.float()
    if is_causal:
        length_q, length_k = scores.shape[-2], scores.shape[-1]
        keep = torch.ones(length_q, length_k, dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores


def dropout_mask(shape: torch.Size, dropout_p: float, seed: int, device: torch.device) -> torch.Tensor:
    """The keep-mask of ``dropout_p`` for ``seed``: the same mask each time it is asked for with that seed."""
    # A CPU generator seeded per call: the recompute variant regenerates the same mask in backward from the seed,
    # as the SDK's kernel does from its saved seed.
    generator = torch.Generator().manual_seed(seed)
    keep = torch.rand(shape, generator=generator) >= dropout_p
    return keep.to(device)


def sdpa_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    scale: float,
    is_causal: bool,
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``sdpa_fwd`` / ``sdpa_recomp_fwd``: output, row max ``m``, inverse row sum ``linv``, dropout mask, probabilities.

    The softmax is the kernel's: ``exp(s - m) * linv`` in float32. A fully masked row gives zeros (no NaN).
    """
    scores = _scores(q, k, attn_mask, scale, is_causal)
    m = scores.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    exp = torch.exp(scores - m)
    total = exp.sum(dim=-1, keepdim=True)
    linv = torch.where(total > 0, 1.0 / total, torch.zeros_like(total))
    probs = exp * linv
    mask = None
    dropped = probs
    if dropout_p > 0.0:
        mask = dropout_mask(probs.shape, dropout_p, seed, probs.device)
        dropped = probs * mask / (1.0 - dropout_p)
    out = torch.matmul(dropped, v.float()).to(q.dtype)
    return out, m, linv, mask, probs


def sdpa_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    m: torch.Tensor,
    linv: torch.Tensor,
    mask: torch.Tensor | None,
    dropout_p: float,
    scale: float,
    is_causal: bool,
    probs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``sdpa_bwd`` / ``sdpa_recomp_bwd``: the gradients of q, k and v.

    ``sdpa_bwd`` gets the probabilities the forward kept (``probs``); ``sdpa_recomp_bwd`` rebuilds them from the
    scores and the saved ``m`` and ``linv``, as the recompute kernel does to save the memory of the probabilities.
    """
    dq, dk, dv, _ = sdpa_backward_scores(
        dout, q, k, v, attn_mask, m, linv, mask, dropout_p, scale, is_causal, probs=probs
    )
    return dq, dk, dv


def sdpa_backward_scores(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    m: torch.Tensor | None,
    linv: torch.Tensor | None,
    mask: torch.Tensor | None,
    dropout_p: float,
    scale: float,
    is_causal: bool,
    probs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`sdpa_backward`, and the gradient of the softmax input ``dS`` (float32), whose amax fp8 kernels record."""
    if probs is None:
        assert m is not None and linv is not None
        probs = torch.exp(_scores(q, k, attn_mask, scale, is_causal) - m) * linv
    dropped = probs if mask is None else probs * mask / (1.0 - dropout_p)
    dout_f = dout.float()
    dv = torch.matmul(dropped.transpose(-2, -1), dout_f)
    dprobs = torch.matmul(dout_f, v.float().transpose(-2, -1))
    if mask is not None:
        dprobs = dprobs * mask / (1.0 - dropout_p)
    dscores = probs * (dprobs - (dprobs * probs).sum(dim=-1, keepdim=True))
    dq = torch.matmul(dscores, k.float()) * scale
    dk = torch.matmul(dscores.transpose(-2, -1), q.float()) * scale
    return (
        _broadcast_back(dq, q.shape).to(q.dtype),
        _broadcast_back(dk, k.shape).to(k.dtype),
        _broadcast_back(dv, v.shape).to(v.dtype),
        dscores,
    )


def default_scale(q: torch.Tensor) -> float:
    """The SDK's default scale, ``1 / sqrt(head_dim)``."""
    return 1.0 / math.sqrt(q.size(-1))
