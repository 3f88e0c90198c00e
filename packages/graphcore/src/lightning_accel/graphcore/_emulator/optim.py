"""``poptorch.optim``: torch optimizers with the device-side extras ``loss_scaling`` and ``max_grad_norm``.

``max_grad_norm`` clips the gradients of each weight update by their global norm on the device; ``loss_scaling``
multiplies the loss before backward and divides the gradients by it before the update (it protects float16
gradients from underflow and leaves float32 results unchanged).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "DeviceOptimizerMixin", "SUPPORTED_TYPES"]


class DeviceOptimizerMixin:
    """The attributes poptorch optimizers add to torch's."""

    loss_scaling: float
    max_grad_norm: float | None

    def _init_device_attributes(self, loss_scaling: float | None, max_grad_norm: float | None) -> None:
        if loss_scaling is not None and (not isinstance(loss_scaling, (int, float)) or loss_scaling <= 0):
            raise ValueError(f"loss_scaling must be a positive number or None, got {loss_scaling!r}.")
        if max_grad_norm is not None and (not isinstance(max_grad_norm, (int, float)) or max_grad_norm <= 0):
            raise ValueError(f"max_grad_norm must be a positive number or None, got {max_grad_norm!r}.")
        self.loss_scaling = float(loss_scaling or 1.0)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)


Params = Iterable[torch.Tensor] | Iterable[dict[str, Any]]


class SGD(DeviceOptimizerMixin, torch.optim.SGD):
    """``poptorch.optim.SGD``.

    Example:
        >>> opt = SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1, max_grad_norm=1.0)
        >>> opt.max_grad_norm
        1.0
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        loss_scaling: float | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        torch.optim.SGD.__init__(
            self, params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov
        )
        self._init_device_attributes(loss_scaling, max_grad_norm)


class Adam(DeviceOptimizerMixin, torch.optim.Adam):
    """``poptorch.optim.Adam`` (AMSGrad is not supported on IPUs).

    Example:
        >>> Adam(torch.nn.Linear(2, 1).parameters(), lr=0.01).loss_scaling
        1.0
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        loss_scaling: float | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        if amsgrad:
            raise ValueError("Only non-amsgrad Adam/AdamW optimizers are supported: pass amsgrad=False.")
        torch.optim.Adam.__init__(self, params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self._init_device_attributes(loss_scaling, max_grad_norm)


class AdamW(DeviceOptimizerMixin, torch.optim.AdamW):
    """``poptorch.optim.AdamW`` (AMSGrad is not supported on IPUs).

    Example:
        >>> AdamW(torch.nn.Linear(2, 1).parameters()).defaults["weight_decay"]
        0.01
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        loss_scaling: float | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        if amsgrad:
            raise ValueError("Only non-amsgrad Adam/AdamW optimizers are supported: pass amsgrad=False.")
        torch.optim.AdamW.__init__(self, params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self._init_device_attributes(loss_scaling, max_grad_norm)


class RMSprop(DeviceOptimizerMixin, torch.optim.RMSprop):
    """``poptorch.optim.RMSprop``.

    Example:
        >>> RMSprop(torch.nn.Linear(2, 1).parameters(), lr=0.01).max_grad_norm is None
        True
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        loss_scaling: float | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        torch.optim.RMSprop.__init__(
            self, params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered
        )
        self._init_device_attributes(loss_scaling, max_grad_norm)


# What setOptimizer accepts: torch's four and their poptorch subclasses.
SUPPORTED_TYPES: tuple[type[torch.optim.Optimizer], ...] = (
    torch.optim.SGD,
    torch.optim.Adam,
    torch.optim.AdamW,
    torch.optim.RMSprop,
)
