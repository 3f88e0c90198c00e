"""Emulation of ``habana_frameworks.torch.hpex.optimizers.FusedSGD``: the SDK's fused SGD (with momentum).

The SDK (gaudi-pytorch-bridge 1.19.0, ``hpex/optimizers/FusedSGD.py``) runs one ``optimizer_sgd`` or
``optimizer_sgd_momentum`` kernel per group, with a step counter ``step_t`` so that the first step starts the
momentum buffer from the gradient. The emulator keeps the Python part and runs torch.optim.SGD's formula
(weight decay added to the gradient, dampening, Nesterov) with torch operations (``hpex/_fused_ops.py``).

Example:
    >>> import torch
    >>> from habana_frameworks.torch.hpex.optimizers import FusedSGD
    >>> optimizer = FusedSGD(torch.nn.Linear(4, 2).to("hpu").parameters(), lr=0.1, momentum=0.9)
"""

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer
from torch.optim.optimizer import required

from ... import core as htcore
from ...utils.internal import is_lazy
from .. import _fused_ops

__all__ = ["FusedSGD"]

hpu = torch.device("hpu")
cpu = torch.device("cpu")


class FusedSGD(Optimizer):
    """Stochastic gradient descent with momentum, one fused kernel per parameter group on Gaudi.

    Args:
        params: The parameters (or parameter groups) to optimize.
        lr: The learning rate (required).
        momentum: The momentum factor (0: plain SGD).
        weight_decay: L2 penalty, added to the gradient.
        dampening: Dampening of the momentum.
        nesterov: Nesterov momentum (needs a momentum and no dampening).

    Example:
        >>> import torch
        >>> from habana_frameworks.torch.hpex.optimizers import FusedSGD
        >>> optimizer = FusedSGD(torch.nn.Linear(4, 2).to("hpu").parameters(), lr=0.1)
    """

    def __init__(
        self,
        params: Iterable[torch.nn.parameter.Parameter],
        lr: float = required,  # type: ignore[assignment]  # the SDK's default: torch's "required" marker
        momentum: float = 0,
        weight_decay: float = 0,
        dampening: float = 0,
        nesterov: bool = False,
    ) -> None:
        # The SDK's checks and texts (FusedSGD.py:41-58).
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= dampening:
            raise ValueError(f"Invalid dampening value: {dampening}")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "dampening": dampening,
            "nesterov": nesterov,
        }
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)
        # One step counter for the whole optimizer, as the SDK's step_t (it counts steps that used momentum).
        self.step_t = 0
        self.is_lazy = is_lazy()
        htcore.step_closure._mark_step_if_lazy()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform a single optimization step.

        Args:
            closure: Re-evaluates the model and returns the loss.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        used_momentum = False
        for group in self.param_groups:
            grads, weights, buffers = [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("SGD does not support sparse gradients, please consider SparseSGD")
                grads.append(p.grad)
                weights.append(p.data)
                if group["momentum"] != 0:
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    buffers.append(state["momentum_buffer"])
            momentum = group["momentum"]
            _fused_ops.sgd(
                grads,
                weights,
                buffers if momentum != 0 else None,
                self.step_t == 0,
                group["lr"],
                group["weight_decay"],
                momentum,
                group["dampening"],
                group["nesterov"],
            )
            used_momentum = used_momentum or momentum != 0
        if used_momentum:
            self.step_t += 1
        return loss
