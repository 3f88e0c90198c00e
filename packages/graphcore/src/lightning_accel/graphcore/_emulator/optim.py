"""``poptorch.optim``: torch optimizers with the device-side extras ``loss_scaling`` and ``max_grad_norm``.

``max_grad_norm`` clips the gradients of each weight update by their global norm on the device; ``loss_scaling``
multiplies the loss before backward and divides the gradients by it before the update (it protects float16
gradients from underflow and leaves float32 results unchanged).

Their state dictionary is poptorch's (``python/optim.py:67-105`` in poptorch 3.4): the optimizer state lives on the
device, so ``state_dict()`` returns ``{"ipu_state", "ipu_param", "state", "param_groups"}`` where ``ipu_state``
holds the device's state tensors (moments, momentum) and ``ipu_param`` the device's hyper-parameter tensors, both
by name, ``None`` until the optimizer has run on a device; ``state`` and ``param_groups`` are torch's (for learning
rate schedulers). ``load_state_dict`` without the ``ipu_*`` keys raises, as poptorch does. The names are PopART's
for Adam's moments (``Accl1___<param>``, ``Accl2___<param>``, checked in poptorch's ``tests/optimizers_test.py``);
the other state names (``Accl___``, ``Accl3___``, ``Step___``) are the emulator's own.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, Union

import torch

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "DeviceOptimizerMixin",
    "SUPPORTED_TYPES",
    "from_ipu_state",
    "to_ipu_state",
]

# torch state key -> the prefix of its device tensor's name, per optimizer type (the first matching type wins).
_STATE_NAMES: tuple[tuple[type[torch.optim.Optimizer], dict[str, str]], ...] = (
    (torch.optim.AdamW, {"exp_avg": "Accl1", "exp_avg_sq": "Accl2", "step": "Step"}),
    (torch.optim.Adam, {"exp_avg": "Accl1", "exp_avg_sq": "Accl2", "step": "Step"}),
    (torch.optim.RMSprop, {"square_avg": "Accl1", "momentum_buffer": "Accl2", "grad_avg": "Accl3", "step": "Step"}),
    (torch.optim.SGD, {"momentum_buffer": "Accl"}),
)


def _state_names(optimizer: torch.optim.Optimizer) -> dict[str, str]:
    return next(names for kind, names in _STATE_NAMES if isinstance(optimizer, kind))


def to_ipu_state(
    optimizer: torch.optim.Optimizer, named_params: list[tuple[str, torch.Tensor]], loss_scaling: float
) -> dict[str, dict[str, torch.Tensor]]:
    """``ipu_state`` and ``ipu_param`` of the device ``optimizer`` whose parameters are ``named_params``."""
    names = _state_names(optimizer)
    state: dict[str, torch.Tensor] = {}
    params: dict[str, torch.Tensor] = {"lossScaling_FLOAT": torch.tensor(float(loss_scaling))}
    group_of = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    for name, param in named_params:
        for key, value in optimizer.state.get(param, {}).items():
            if isinstance(value, torch.Tensor) and key in names:
                state[f"{names[key]}___{name}"] = value.detach().clone()
        group = group_of[id(param)]
        params[f"learningRate___specific___{name}"] = torch.tensor(float(group["lr"]))
        params[f"weightDecay___specific___{name}"] = torch.tensor(float(group.get("weight_decay", 0.0)))
    return {"ipu_state": state, "ipu_param": params}


def from_ipu_state(
    optimizer: torch.optim.Optimizer, named_params: list[tuple[str, torch.Tensor]], ipu_state: dict[str, torch.Tensor]
) -> None:
    """Write ``ipu_state`` into the device ``optimizer``'s state (a name it does not know is left out, with a log)."""
    names = _state_names(optimizer)
    known: set[str] = set()
    for name, param in named_params:
        entries = {
            key: ipu_state[f"{prefix}___{name}"].detach().clone()
            for key, prefix in names.items()
            if f"{prefix}___{name}" in ipu_state
        }
        known.update(f"{prefix}___{name}" for prefix in names.values())
        if entries:
            optimizer.state[param] = entries
    unknown = sorted(set(ipu_state) - known)
    if unknown:
        # poptorch logs a warning for state tensors the executable has no slot for (poptorch.cpp:1012).
        logging.getLogger("poptorch").warning("Optimizer state tensors not used by the model: %s", unknown)


class DeviceOptimizerMixin:
    """What poptorch optimizers add to torch's: ``loss_scaling``, ``max_grad_norm`` and the IPU state format."""

    loss_scaling: float
    max_grad_norm: float | None
    _state_dict: dict[str, Any]
    ipu_state_is_dirty: bool
    host_state_is_dirty: bool

    def state_dict(self) -> dict[str, Any]:
        """The format of poptorch: ``ipu_state`` and ``ipu_param`` next to torch's ``state`` and ``param_groups``."""
        return {**self._state_dict, **torch.optim.Optimizer.state_dict(self)}  # type: ignore[arg-type]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state saved by a poptorch optimizer; a torch optimizer's state raises ``RuntimeError``."""
        torch.optim.Optimizer.load_state_dict(self, state_dict)  # type: ignore[arg-type]
        self.set_state_dict(state_dict)

    def set_state_dict(self, state: dict[str, Any]) -> None:
        """Keep ``state``'s device part; it is written to the device when the model next runs (poptorch's texts)."""
        if not state:
            raise RuntimeError("Cannot load optimizer state dictionary because it is empty.")
        if not ("ipu_state" in state and "ipu_param" in state):
            raise RuntimeError("Only IPU optimizer states can be loaded onto the IPU.")
        self._state_dict = {"ipu_state": state["ipu_state"], "ipu_param": state["ipu_param"]}
        self.ipu_state_is_dirty = True
        self.host_state_is_dirty = False

    def has_state(self) -> bool:
        """Whether device state (from a run or a checkpoint) is held."""
        return self._state_dict.get("ipu_state") is not None and self._state_dict.get("ipu_param") is not None

    def _init_device_attributes(self, loss_scaling: float | None, max_grad_norm: float | None) -> None:
        if loss_scaling is not None and (not isinstance(loss_scaling, (int, float)) or loss_scaling <= 0):
            raise ValueError(f"loss_scaling must be a positive number or None, got {loss_scaling!r}.")
        if max_grad_norm is not None and (not isinstance(max_grad_norm, (int, float)) or max_grad_norm <= 0):
            raise ValueError(f"max_grad_norm must be a positive number or None, got {max_grad_norm!r}.")
        self.loss_scaling = float(loss_scaling or 1.0)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self._state_dict = {"ipu_state": None, "ipu_param": None}
        self.ipu_state_is_dirty = False
        self.host_state_is_dirty = False


# typing names: this alias is evaluated at run time, on Python 3.8 too.
Params = Union[Iterable[torch.Tensor], Iterable[Dict[str, Any]]]


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
    """``poptorch.optim.RMSprop`` (no ``max_grad_norm``, as in poptorch 3.4).

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
    ) -> None:
        # No max_grad_norm: poptorch 3.4's RMSprop has none (optim.py, unlike SGD, Adam, AdamW and LAMB).
        torch.optim.RMSprop.__init__(
            self, params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered
        )
        self._init_device_attributes(loss_scaling, None)


# What setOptimizer accepts: torch's four and their poptorch subclasses.
SUPPORTED_TYPES: tuple[type[torch.optim.Optimizer], ...] = (
    torch.optim.SGD,
    torch.optim.Adam,
    torch.optim.AdamW,
    torch.optim.RMSprop,
)
