"""Emulation of ``habana_frameworks.torch.hpex.optimizers.FusedAdamW``: the SDK's fused AdamW.

The SDK's optimizer (gaudi-pytorch-bridge 1.19.0, ``hpex/optimizers/FusedAdamW.py``) updates all parameters of a
group in one ``torch.ops.hpu.optimizer_adamw`` kernel. The emulator keeps its Python part (argument checks, state,
per-group step count, ``bias_correction`` and the old checkpoints' ``correct_bias``) and runs the kernel's formula
with torch operations:

* ``exp_avg = beta1 * exp_avg + (1 - beta1) * g``; ``exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g``;
* decoupled weight decay, ``w *= 1 - lr * weight_decay`` (``FusedAdamW.py:150``), before the step;
* ``w -= lr * sqrt(1 - beta2**t) / (1 - beta1**t) * exp_avg / (sqrt(exp_avg_sq) + eps)``: the bias correction is
  folded into the step size (``FusedAdamW.py:134-137``), so ``eps`` is added to the uncorrected ``sqrt(v)``.

That last point is the one difference from ``torch.optim.AdamW``, which adds ``eps`` after correcting ``v``: the
two agree when ``eps`` is small next to ``sqrt(v)``. The default ``eps`` is ``1e-6`` (torch's is ``1e-8``).
fp8 moments (``moments_dtype`` ``torch.float8_e4m3fn`` / ``float8_e5m2``) are not emulated and refuse.

Example:
    >>> import torch
    >>> from habana_frameworks.torch.hpex.optimizers import FusedAdamW
    >>> model = torch.nn.Linear(4, 2).to("hpu")
    >>> optimizer = FusedAdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    >>> model(torch.randn(3, 4, device="hpu")).sum().backward()
    >>> optimizer.step()
"""

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from ... import core as htcore
from ...utils.internal import is_lazy
from .. import _fused_ops

__all__ = ["FusedAdamW"]

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


class FusedAdamW(Optimizer):
    """AdamW with decoupled weight decay, one fused kernel per parameter group on Gaudi.

    Args:
        params: The parameters (or parameter groups) to optimize.
        lr: The learning rate.
        betas: The decay rates of the first and second moments.
        eps: Added to ``sqrt(exp_avg_sq)`` before the bias correction (see the module's notes).
        weight_decay: Decoupled weight decay: ``w *= 1 - lr * weight_decay`` each step.
        bias_correction: Correct the moments' bias (folded into the step size).
        moments_dtype: The dtype of both moments, or a ``(exp_avg, exp_avg_sq)`` pair; default the parameter's.

    Example:
        >>> import torch
        >>> from habana_frameworks.torch.hpex.optimizers import FusedAdamW
        >>> optimizer = FusedAdamW(torch.nn.Linear(4, 2).to("hpu").parameters(), lr=1e-3)
    """

    def __init__(
        self,
        params: Iterable[torch.nn.parameter.Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        bias_correction: bool = True,
        moments_dtype: torch.dtype | tuple[torch.dtype, torch.dtype] | None = None,
    ) -> None:
        # The SDK's checks and texts (FusedAdamW.py:38-45).
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr} - should be >= 0.0")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter: {betas[0]} - should be in [0.0, 1.0[")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter: {betas[1]} - should be in [0.0, 1.0[")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps} - should be >= 0.0")
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "bias_correction": bias_correction,
        }
        super().__init__(params, defaults)
        self.is_lazy = is_lazy()
        self.moments_dtype = moments_dtype
        self.moments_in_fp8 = self.check_moments_in_fp8()

    def step_wrap(step_func: Callable[..., Any]) -> Callable[..., Any]:  # type: ignore[misc]  # the SDK's decorator
        """Mark a lazy-mode step after ``step_func`` (the SDK's decorator of ``step``)."""

        def wrap_(*args: Any, **kwargs: Any) -> Any:
            result = step_func(*args, **kwargs)
            htcore.step_closure._mark_step_if_lazy()
            return result

        return wrap_

    @step_wrap
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform a single optimization step.

        Args:
            closure: Re-evaluates the model and returns the loss.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.moments_in_fp8:
            raise NotImplementedError(
                f"FusedAdamW(moments_dtype={self.moments_dtype!r}): fp8 moments are not emulated (they need Gaudi's "
                "scaled fp8 kernel). Pass moments_dtype=None (the parameter's dtype) or torch.bfloat16 / "
                "torch.float32, or run on a Gaudi2 or later."
            )
        for group in self.param_groups:
            grads, weights, exp_avgs, exp_avg_sqs = [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Adam does not support sparse gradients, please consider SparseAdam")
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    exp_avg_dtype, exp_avg_sq_dtype = self.get_moment_dtypes(p.dtype)
                    state["exp_avg"] = torch.zeros(p.shape, dtype=exp_avg_dtype, device=p.device)
                    state["exp_avg_sq"] = torch.zeros(p.shape, dtype=exp_avg_sq_dtype, device=p.device)
                grads.append(p.grad)
                weights.append(p.data)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
            if not weights:
                continue
            beta1, beta2 = group["betas"]
            group["step"] = group.get("step", 0) + 1
            step_size = group["lr"]
            if self.is_bias_correction(group):
                bias_correction1 = 1.0 - pow(beta1, group["step"])
                bias_correction2 = 1.0 - pow(beta2, group["step"])
                step_size = step_size * math.sqrt(bias_correction2) / bias_correction1
            modified_wd = 1.0 - group["weight_decay"] * group["lr"]
            _fused_ops.adamw(grads, weights, exp_avgs, exp_avg_sqs, -step_size, beta1, beta2, group["eps"], modified_wd)
        return loss

    def is_bias_correction(self, group: dict[str, Any]) -> bool:
        """The group's ``bias_correction`` (``correct_bias`` in old checkpoints; on when loaded from torch's AdamW)."""
        if "bias_correction" in group:
            return bool(group["bias_correction"])
        if "correct_bias" in group:
            return bool(group["correct_bias"])
        return True

    def get_moment_dtypes(self, param_dtype: torch.dtype) -> tuple[torch.dtype, torch.dtype]:
        """The dtypes of ``(exp_avg, exp_avg_sq)`` for a parameter of ``param_dtype``."""
        if self.moments_dtype is None:
            return param_dtype, param_dtype
        if isinstance(self.moments_dtype, tuple):
            return self.moments_dtype
        return self.moments_dtype, self.moments_dtype

    def check_moments_in_fp8(self) -> bool:
        """Whether a moment is kept in an fp8 dtype."""
        if isinstance(self.moments_dtype, tuple):
            return any(dtype in _FP8 for dtype in self.moments_dtype)
        return self.moments_dtype in _FP8
