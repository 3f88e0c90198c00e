"""Emulation of ``habana_frameworks.torch.hpex.optimizers.FusedAdagrad``: the SDK's fused Adagrad.

The SDK (gaudi-pytorch-bridge 1.19.0, ``hpex/optimizers/FusedAdagrad.py``) runs one ``_hpex_C.fused_adagrad``
kernel per group. Its learning rate is a tensor made from the constructor's ``lr`` (``group["lr_t"]``,
``FusedAdagrad.py:49``): changing ``group["lr"]`` later (a learning-rate scheduler) has no effect, on Gaudi and here.
The emulator runs torch.optim.Adagrad's formula with torch operations.

Example:
    >>> import torch
    >>> from habana_frameworks.torch.hpex.optimizers import FusedAdagrad
    >>> optimizer = FusedAdagrad(torch.nn.Linear(4, 2).to("hpu").parameters(), lr=0.01)
"""

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from ... import core as htcore
from .. import _fused_ops

__all__ = ["FusedAdagrad"]

hpu = torch.device("hpu")
cpu = torch.device("cpu")


class FusedAdagrad(Optimizer):
    """Adagrad, one fused kernel per parameter group on Gaudi.

    Args:
        params: The parameters (or parameter groups) to optimize.
        lr: The learning rate, fixed at construction (see the module's notes).
        lr_decay: The learning-rate decay: ``lr / (1 + (step - 1) * lr_decay)``.
        weight_decay: L2 penalty, added to the gradient.
        initial_accumulator_value: The start of the sum of squared gradients.
        eps: Added to the square root of the sum.

    Example:
        >>> import torch
        >>> from habana_frameworks.torch.hpex.optimizers import FusedAdagrad
        >>> optimizer = FusedAdagrad(torch.nn.Linear(4, 2).to("hpu").parameters())
    """

    def __init__(
        self,
        params: Iterable[torch.nn.parameter.Parameter],
        lr: float = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
    ) -> None:
        # The SDK's checks and texts (FusedAdagrad.py:21-30).
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "eps": eps,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["sum"] = torch.full_like(p, fill_value=initial_accumulator_value)
            group["lr_t"] = lr
            group["step_t"] = 0
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
        for group in self.param_groups:
            grads, weights, sums = [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Adagrad does not support sparse gradients, please consider SparseAdagrad")
                grads.append(p.grad)
                weights.append(p.data)
                sums.append(self.state[p]["sum"])
            group["step_t"] += 1
            _fused_ops.adagrad(
                grads,
                weights,
                sums,
                group["step_t"],
                group["lr_t"],
                group["weight_decay"],
                group["lr_decay"],
                group["eps"],
            )
        return loss
