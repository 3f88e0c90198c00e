"""The SDK's own operators (``torch.ops.hpu.*``) that libraries call, registered when the emulated SDK loads.

The SDK registers them from its C++ library when ``habana_frameworks.torch`` loads. The emulator registers plain
implementations written with torch operations, which run on the ``"hpu"`` device like any other work:

* ``torch.ops.hpu.optimizer_adamw``: the fused AdamW update DeepSpeed's HPU ``FusedAdam`` calls
  (``deepspeed/ops/op_builder/hpu/fused_adam.py``). The bias correction is folded into ``neg_step_t`` by the
  caller; ``weight_decay`` is the multiplier ``1 - lr * wd`` (a float in lazy mode, a one-element tensor in eager
  mode, as DeepSpeed passes it). A plain, unfused implementation: same arithmetic, not the SDK's kernel.
"""

from __future__ import annotations

import torch

__all__ = ["register"]

_library: torch.library.Library | None = None

_ARGS = (
    "Tensor[] gradient_vec, Tensor(a!)[] weight_vec, Tensor(b!)[] exp_avg_vec, Tensor(c!)[] exp_avg_sq_vec, "
    "Tensor neg_step_t, float beta1, float beta2, float epsilon"
)


def _adamw(
    grads: list[torch.Tensor],
    params: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    neg_step: torch.Tensor,
    beta1: float,
    beta2: float,
    epsilon: float,
    weight_decay: torch.Tensor | float,
) -> None:
    with torch.no_grad():
        for grad, param, exp_avg, exp_avg_sq in zip(grads, params, exp_avgs, exp_avg_sqs, strict=True):
            exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
            param.mul_(weight_decay)
            param.add_(neg_step * exp_avg / (exp_avg_sq.sqrt() + epsilon))


def register() -> None:
    """Define the operators once per process (the SDK's library loads once too)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("hpu", "DEF")
    library.define(f"optimizer_adamw({_ARGS}, Tensor weight_decay) -> ()")
    library.define(f"optimizer_adamw.float_weight_decay({_ARGS}, float weight_decay) -> ()")
    library.impl("optimizer_adamw", _adamw, "CompositeExplicitAutograd")
    library.impl("optimizer_adamw.float_weight_decay", _adamw, "CompositeExplicitAutograd")
    _library = library
