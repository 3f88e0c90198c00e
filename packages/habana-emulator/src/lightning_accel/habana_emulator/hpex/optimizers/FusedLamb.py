"""Emulation of ``habana_frameworks.torch.hpex.optimizers.FusedLamb``: the SDK's fused LAMB.

The SDK (gaudi-pytorch-bridge 1.19.0, ``hpex/optimizers/FusedLamb.py``) clips the global gradient norm to
``max_grad_norm`` (``optimizer_lamb_fused_norm``), then per group computes the Adam update plus ``weight_decay * w``
and both norms (``optimizer_lamb_phase1``) and applies it with the trust ratio ``norm(w) / norm(update)``
(``optimizer_lamb_phase2``; the ratio is 1 where ``weight_decay`` is 0 and ``use_lamb`` is off). The emulator keeps
the Python part and runs those three kernels' formulas (NVIDIA apex's LAMB, which they follow) with torch operations.
As on the SDK, ``adam_w_mode`` is stored but the update always adds ``weight_decay * w`` (phase 1 takes no mode),
and ``fused`` does nothing.

Example:
    >>> import torch
    >>> from habana_frameworks.torch.hpex.optimizers import FusedLamb
    >>> optimizer = FusedLamb(torch.nn.Linear(4, 2).to("hpu").parameters(), lr=1e-3)
"""

from collections.abc import Callable
from typing import Any

import torch
from torch.optim import Optimizer

from ... import core as htcore
from .. import _fused_ops

__all__ = ["FusedLamb"]


class FusedLamb(Optimizer):
    """LAMB (layer-wise adaptive moments), fused kernels per parameter group on Gaudi.

    Args:
        params: The parameters (or parameter groups) to optimize.
        lr: The learning rate.
        bias_correction: Correct the moments' bias.
        betas: The decay rates of the moments.
        eps: Added to the corrected ``sqrt(v)``.
        weight_decay: Added to the update as ``weight_decay * w``.
        amsgrad: Not supported (as on the SDK: it raises).
        adam_w_mode: Stored, as on the SDK (which does not use it).
        grad_averaging: Scale the gradient by ``1 - beta1`` in the first moment.
        set_grad_none: ``zero_grad()`` sets gradients to ``None``.
        max_grad_norm: Clip the global gradient norm to this first (``None``: no clipping).
        use_lamb: Apply the trust ratio to parameters without weight decay too.
        fused: Accepted, as on the SDK; no effect.
        dtype: The dtype the gradients are cast to for the global norm.

    Example:
        >>> import torch
        >>> from habana_frameworks.torch.hpex.optimizers import FusedLamb
        >>> optimizer = FusedLamb(torch.nn.Linear(4, 2).to("hpu").parameters(), lr=1e-3, weight_decay=0.01)
    """

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        adam_w_mode: bool = True,
        grad_averaging: bool = True,
        set_grad_none: bool = True,
        max_grad_norm: float | None = 1.0,
        use_lamb: bool = False,
        fused: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        if amsgrad:
            raise RuntimeError("FusedLamb does not support the AMSGrad variant.")
        defaults = {
            "lr": lr,
            "bias_correction": bias_correction,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "grad_averaging": grad_averaging,
            "max_grad_norm": max_grad_norm,
        }
        super().__init__(params, defaults)
        self.fused = fused
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none
        self.use_lamb = use_lamb
        self.device = self.param_groups[0]["params"][0].device
        self.dtype = dtype

    def zero_grad(self) -> None:  # type: ignore[override]  # the SDK's has no set_to_none
        """Clear the gradients (set them to ``None`` when ``set_grad_none``)."""
        if self.set_grad_none:
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None
        else:
            super().zero_grad()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform a single optimization step.

        Args:
            closure: Re-evaluates the model and returns the loss.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        max_grad_norm = self.defaults["max_grad_norm"]
        if max_grad_norm is not None:
            norm_grads = []
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.grad.is_sparse:
                        raise RuntimeError("Lamb does not support sparse gradients, consider SparseAdam instead.")
                    norm_grads.append(p.grad if self.dtype is None else p.grad.to(dtype=self.dtype))
            divisor = _fused_ops.lamb_divisor(norm_grads, max_grad_norm)
        else:
            divisor = torch.tensor([1.0], dtype=torch.float32, device=self.device)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            group["step"] = group.get("step", 0) + 1
            if group["bias_correction"]:
                bias_correction1 = 1.0 - pow(beta1, group["step"])
                bias_correction2 = 1.0 - pow(beta2, group["step"])
            else:
                bias_correction1 = bias_correction2 = 1.0
            grads, weights, exp_avgs, exp_avg_sqs = [], [], [], []
            htcore.step_closure._mark_step_if_lazy()
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros(p.shape, dtype=p.dtype, device=self.device)
                    state["exp_avg_sq"] = torch.zeros(p.shape, dtype=p.dtype, device=self.device)
                grads.append(p.grad)
                weights.append(p.data)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
            if not weights:
                continue
            updates, weight_norms, update_norms = _fused_ops.lamb_phase1(
                grads,
                weights,
                exp_avgs,
                exp_avg_sqs,
                divisor,
                bool(group["grad_averaging"]),
                beta1,
                beta2,
                group["eps"],
                bias_correction1,
                bias_correction2,
                group["weight_decay"],
            )
            _fused_ops.lamb_phase2(
                weights, update_norms, weight_norms, updates, -group["lr"], group["weight_decay"], self.use_lamb
            )
            htcore.step_closure._mark_step_if_lazy()
        return loss
