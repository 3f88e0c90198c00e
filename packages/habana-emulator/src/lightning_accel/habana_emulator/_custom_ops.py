"""The SDK's own operators (``torch.ops.hpu.*``) that libraries call, registered when the emulated SDK loads.

The SDK registers them from its C++ library when ``habana_frameworks.torch`` loads, and each mode loads its own
library with its own schema. The emulator registers plain implementations written with torch operations, which run
on the ``"hpu"`` device like any other work:

* ``torch.ops.hpu.optimizer_adamw``: the fused AdamW update DeepSpeed's HPU ``FusedAdam`` calls
  (``deepspeed/ops/op_builder/hpu/fused_adam.py``). The bias correction is folded into ``neg_step_t`` by the
  caller; ``weight_decay`` is the multiplier ``1 - lr * wd``. Schemas of gaudi-pytorch-bridge 1.19.0:

  - eager mode (``habana_eager/eager_custom_op_register.cpp:2181``): ``weight_decay`` is a one-element tensor,
    followed by ``bool has_weight_decay`` and the optional fp8 moment scales ``exp_avg_scales`` /
    ``exp_avg_sq_scales``;
  - lazy mode (``habana_kernels/kernels_register.cpp:2210``, as listed in ``scripts/ops_list/custom_ops_list.csv``):
    ``float weight_decay``, nine arguments.

  The mode the SDK loaded in gets its schema as ``hpu::optimizer_adamw``; the test suite's in-process mode switch adds
  the other as the overload ``optimizer_adamw.lazy`` / ``.eager``. A plain, unfused implementation: same arithmetic,
  not the SDK's kernel; the fp8 moment scales are not emulated (a clear error).
"""

from __future__ import annotations

import torch

__all__ = ["register"]

_library: torch.library.Library | None = None
_registered: set[bool] = set()

_ARGS = (
    "Tensor[] gradient_vec, Tensor(a!)[] weight_vec, Tensor(b!)[] exp_avg_vec, Tensor(c!)[] exp_avg_sq_vec, "
    "Tensor neg_step_t, float beta1, float beta2, float epsilon"
)
_EAGER = (
    f"{_ARGS}, Tensor weight_decay, bool has_weight_decay, Tensor(d!)[]? exp_avg_scales=None, "
    "Tensor(e!)[]? exp_avg_sq_scales=None"
)
_LAZY = f"{_ARGS}, float weight_decay"


def _update(
    grads: list[torch.Tensor],
    params: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    neg_step: torch.Tensor,
    beta1: float,
    beta2: float,
    epsilon: float,
    weight_decay: torch.Tensor | float,
    has_weight_decay: bool,
) -> None:
    if not params:
        raise RuntimeError("optimizer_adamw : can not process empty weight vector")  # the SDK's check and text
    with torch.no_grad():
        for grad, param, exp_avg, exp_avg_sq in zip(grads, params, exp_avgs, exp_avg_sqs, strict=True):
            exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
            if has_weight_decay:
                param.mul_(weight_decay)
            param.add_(neg_step * exp_avg / (exp_avg_sq.sqrt() + epsilon))


def _adamw_eager(
    grads: list[torch.Tensor],
    params: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    neg_step: torch.Tensor,
    beta1: float,
    beta2: float,
    epsilon: float,
    weight_decay: torch.Tensor,
    has_weight_decay: bool,
    exp_avg_scales: list[torch.Tensor] | None = None,
    exp_avg_sq_scales: list[torch.Tensor] | None = None,
) -> None:
    if (exp_avg_scales is None) != (exp_avg_sq_scales is None):
        raise RuntimeError("optimizer_adamw : expects both or neighter scales to be set")  # the SDK's text, as is
    if exp_avg_scales is not None:
        raise NotImplementedError(
            "torch.ops.hpu.optimizer_adamw with exp_avg_scales / exp_avg_sq_scales (fp8 moments) is not emulated: "
            "the emulator keeps the moments in their own dtype. Leave the scales out, or run this on a Gaudi."
        )
    _update(grads, params, exp_avgs, exp_avg_sqs, neg_step, beta1, beta2, epsilon, weight_decay, has_weight_decay)


def _adamw_lazy(
    grads: list[torch.Tensor],
    params: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    neg_step: torch.Tensor,
    beta1: float,
    beta2: float,
    epsilon: float,
    weight_decay: float,
) -> None:
    _update(grads, params, exp_avgs, exp_avg_sqs, neg_step, beta1, beta2, epsilon, weight_decay, True)


def register(lazy: bool) -> None:
    """Define the operators of the mode the SDK loads in (once per mode and process: the SDK's library loads once)."""
    global _library
    if lazy in _registered:
        return
    if _library is None:
        _library = torch.library.Library("hpu", "DEF")
    schema, implementation = (_LAZY, _adamw_lazy) if lazy else (_EAGER, _adamw_eager)
    name = "optimizer_adamw" if not _registered else f"optimizer_adamw.{'lazy' if lazy else 'eager'}"
    _library.define(f"{name}({schema}) -> ()")
    _library.impl(name, implementation, "CompositeExplicitAutograd")
    _registered.add(lazy)
