"""``poptorch.optim``: poptorch 3.4's optimizers, with their constructor arguments and constant/variable rule.

Each class has poptorch 3.4's signature (``python/optim.py``): every hyper-parameter defaults to ``None``, and only
the ones passed explicitly (not ``None``) are *variable*: they may change after the model is compiled
(``_parseArgs``, ``optim.py:50-64``). The others are compiled in as constants; changing one later makes PopART
refuse the new optimizer (see :mod:`.optimizer_values`). ``variable_attrs`` (:class:`VariableAttributes`) reads and
changes that marking (``optim.py:10-47``).

The device-only settings are kept as attributes as poptorch keeps them: ``loss_scaling`` (default 1.0),
``max_grad_norm`` (default ``inf``: no clipping), the accumulator types (``accum_type``, ...: float32 or float16),
SGD's ``velocity_scaling`` and ``use_combined_accum``, AdamW's and LAMB's ``bias_correction``, RMSprop's
``use_tf_variant``. The emulator computes in the backing device's float32 whatever the accumulator types are.

Their state dictionary is poptorch's (``optim.py:67-105``): the optimizer state lives on the device, so
``state_dict()`` returns ``{"ipu_state", "ipu_param", "state", "param_groups"}``, where ``ipu_state`` holds the
device's state tensors by PopART's names and ``ipu_param`` its optimizer inputs (see :mod:`.optimizer_state`),
both ``None`` until the model is compiled and attached. ``load_state_dict`` without the ``ipu_*`` keys raises, as
poptorch does.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterable

import torch

from .device_optimizers import VELOCITY

# poptorch.optim's own names; TensorFlowRMSprop and check_max_grad_norm serve the emulated executor.
__all__ = ["LAMB", "SGD", "Adam", "AdamW", "Optimizer", "RMSprop", "VariableAttributes", "logger"]

logger = logging.getLogger("poptorch")
_ACCUMULATOR_TYPES = (torch.float16, torch.float32)
_ACCUMULATOR_ERROR = "Accumulation types must be either torch.float32 or torch.float16"
_ACCUMULATOR_ATTRIBUTES = ("accum_type", "first_order_momentum_accum_type", "second_order_momentum_accum_type")


class VariableAttributes:
    """Which attributes of an optimizer are variable (may change after compilation) and which are constant.

    Every poptorch optimizer has one as ``variable_attrs``; an attribute passed explicitly to the constructor is
    variable, any other is constant.

    Example:
        >>> opt = SGD(torch.nn.Linear(2, 1).parameters(), lr=0.01)
        >>> opt.variable_attrs.isConstant("lr"), opt.variable_attrs.isConstant("momentum")
        (False, True)
        >>> opt.variable_attrs.markAsVariable("momentum")
        >>> opt.variable_attrs.isConstant("momentum")
        False
    """

    def __init__(self, variable_attributes: list[str], allowed_attributes: list[str]) -> None:
        self._variable_attributes = list(variable_attributes)
        self._allowed_attributes = list(allowed_attributes)

    def isConstant(self, attr: str) -> bool:
        """Whether ``attr`` is a constant of the compiled model."""
        return attr not in self._variable_attributes

    def _check(self, attr: str) -> None:
        # An assert in poptorch (optim.py:35-37, 44-46), so an AssertionError here too.
        assert attr in self._allowed_attributes, f"Unknown attribute {attr}, allowed values: {self._allowed_attributes}"

    def markAsConstant(self, attr: str) -> None:
        """Compile ``attr`` in as a constant."""
        self._check(attr)
        self._variable_attributes = [a for a in self._variable_attributes if a != attr]

    def markAsVariable(self, attr: str) -> None:
        """Let ``attr`` change after compilation."""
        self._check(attr)
        self._variable_attributes.append(attr)


def _split_arguments(arguments: dict[str, Any], device_only: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """The torch optimizer's arguments the user passed, and the names of every argument passed (the variable ones).

    ``arguments`` is the constructor's ``locals()``, taken before any other local exists.
    """
    given = {name: value for name, value in arguments.items() if name != "self" and value is not None}
    return {name: value for name, value in given.items() if name not in device_only}, list(given)


def _accumulator_type(value: torch.dtype | None) -> torch.dtype:
    value = torch.float32 if value is None else value
    assert value in _ACCUMULATOR_TYPES, _ACCUMULATOR_ERROR
    return value


class Optimizer:
    """What every poptorch optimizer adds to torch's: the device state format (``ipu_state``, ``ipu_param``)."""

    _state_dict: dict[str, Any]
    ipu_state_is_dirty: bool
    host_state_is_dirty: bool
    variable_attrs: VariableAttributes
    loss_scaling: float

    def __init__(self) -> None:
        self._state_dict = {"ipu_state": None, "ipu_param": None}
        # True: a loaded state waits to be written to the device.
        self.ipu_state_is_dirty = False
        # True: the device's state is newer than the host's copy.
        self.host_state_is_dirty = False

    def state_dict(self) -> dict[str, Any]:
        """Poptorch's format: ``ipu_state`` and ``ipu_param`` next to torch's ``state`` and ``param_groups``."""
        return self.get_state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a state saved by a poptorch optimizer; a torch optimizer's state raises ``RuntimeError``."""
        torch.optim.Optimizer.load_state_dict(self, state)  # type: ignore[arg-type]
        self.set_state_dict(state)

    def get_state_dict(self) -> dict[str, Any]:
        """The device state and torch's state (learning-rate schedulers read the latter)."""
        return {**self._state_dict, **torch.optim.Optimizer.state_dict(self)}  # type: ignore[arg-type]

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


class SGD(Optimizer, torch.optim.SGD):
    """``poptorch.optim.SGD``: torch's SGD with loss and velocity scaling, accumulator types and clipping.

    Example:
        >>> opt = SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1, momentum=0.9, max_grad_norm=1.0)
        >>> opt.max_grad_norm, opt.variable_attrs.isConstant("momentum")
        (1.0, False)
    """

    # poptorch 3.4 optim.py:184-194.
    _child_vars = ("loss_scaling",)
    _child_only = (
        *_child_vars,
        "velocity_scaling",
        "use_combined_accum",
        "accum_type",
        "velocity_accum_type",
        "max_grad_norm",
    )
    _group_vars = (
        "lr",
        "momentum",
        "dampening",
        "weight_decay",
        "nesterov",
        "velocity_scaling",
    )

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float | None = None,
        dampening: float | None = None,
        weight_decay: float | None = None,
        nesterov: bool | None = None,
        maximize: bool | None = None,
        foreach: bool | None = None,
        differentiable: bool | None = None,
        loss_scaling: float | None = None,
        velocity_scaling: float | None = None,
        use_combined_accum: bool | None = None,
        accum_type: torch.dtype | None = None,
        velocity_accum_type: torch.dtype | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        torch_args, variables = _split_arguments(locals(), SGD._child_only)
        Optimizer.__init__(self)
        torch.optim.SGD.__init__(self, **torch_args)
        self.loss_scaling = 1.0 if loss_scaling is None else loss_scaling
        self.use_combined_accum = bool(use_combined_accum)
        if velocity_scaling is not None and not self.use_combined_accum:
            logger.warning(
                "velocity_scaling value ignored when using the separate variant (use_combined_accum=False). In "
                "future, this will lead to an error. Please update your code."
            )
        if self.use_combined_accum:
            # Per group, in defaults and groups (optim.py:266-269).
            scaling = 1.0 if velocity_scaling is None else velocity_scaling
            self.defaults["velocity_scaling"] = scaling
            for group in self.param_groups:
                group.setdefault("velocity_scaling", scaling)
        self.accum_type = _accumulator_type(accum_type)
        self.velocity_accum_type = _accumulator_type(velocity_accum_type)
        self.max_grad_norm = float("inf") if max_grad_norm is None else max_grad_norm
        self.variable_attrs = VariableAttributes(variables, [*self.defaults, *SGD._child_vars])


class Adam(Optimizer, torch.optim.Adam):
    """``poptorch.optim.Adam`` (AMSGrad is not supported on IPUs).

    Example:
        >>> Adam(torch.nn.Linear(2, 1).parameters(), lr=0.01).loss_scaling
        1.0
    """

    _child_vars = ("loss_scaling",)
    _child_only = (
        *_child_vars,
        *_ACCUMULATOR_ATTRIBUTES,
        "max_grad_norm",
    )
    _group_vars = (
        "lr",
        "betas",
        "eps",
        "weight_decay",
        "amsgrad",
    )

    def __init__(
        self,
        params: Iterable[Any],
        lr: float | None = None,
        betas: tuple[float, float] | None = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        amsgrad: bool | None = None,
        foreach: bool | None = None,
        maximize: bool | None = None,
        capturable: bool | None = None,
        differentiable: bool | None = None,
        fused: bool | None = None,
        loss_scaling: float | None = None,
        accum_type: torch.dtype | None = None,
        first_order_momentum_accum_type: torch.dtype | None = None,
        second_order_momentum_accum_type: torch.dtype | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        torch_args, variables = _split_arguments(locals(), Adam._child_only)
        Optimizer.__init__(self)
        torch.optim.Adam.__init__(self, **torch_args)
        _init_adaptive(
            self, loss_scaling, accum_type, first_order_momentum_accum_type, second_order_momentum_accum_type
        )
        self.max_grad_norm = float("inf") if max_grad_norm is None else max_grad_norm
        self.variable_attrs = VariableAttributes(variables, [*self.defaults, *Adam._child_vars])


def _init_adaptive(
    optimizer: Any,
    loss_scaling: float | None,
    accum_type: torch.dtype | None,
    first: torch.dtype | None,
    second: torch.dtype | None,
) -> None:
    optimizer.loss_scaling = 1.0 if loss_scaling is None else loss_scaling
    optimizer.accum_type = _accumulator_type(accum_type)
    optimizer.first_order_momentum_accum_type = _accumulator_type(first)
    optimizer.second_order_momentum_accum_type = _accumulator_type(second)


class AdamW(Optimizer, torch.optim.AdamW):
    """``poptorch.optim.AdamW`` (AMSGrad is not supported on IPUs); ``bias_correction=False`` drops Adam's correction.

    Example:
        >>> AdamW(torch.nn.Linear(2, 1).parameters()).defaults["weight_decay"]
        0.01
    """

    _child_vars = ("loss_scaling",)
    _child_only = (
        *_child_vars,
        "bias_correction",
        *_ACCUMULATOR_ATTRIBUTES,
        "max_grad_norm",
    )
    _group_vars = (
        "lr",
        "betas",
        "weight_decay",
        "eps",
        "amsgrad",
    )

    def __init__(
        self,
        params: Iterable[Any],
        lr: float | None = None,
        betas: tuple[float, float] | None = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        amsgrad: bool | None = None,
        maximize: bool | None = None,
        foreach: bool | None = None,
        capturable: bool | None = None,
        differentiable: bool | None = None,
        fused: bool | None = None,
        loss_scaling: float | None = None,
        bias_correction: bool | None = None,
        accum_type: torch.dtype | None = None,
        first_order_momentum_accum_type: torch.dtype | None = None,
        second_order_momentum_accum_type: torch.dtype | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        torch_args, variables = _split_arguments(locals(), AdamW._child_only)
        Optimizer.__init__(self)
        torch.optim.AdamW.__init__(self, **torch_args)
        _init_adaptive(
            self, loss_scaling, accum_type, first_order_momentum_accum_type, second_order_momentum_accum_type
        )
        self.bias_correction = True if bias_correction is None else bias_correction
        self.max_grad_norm = float("inf") if max_grad_norm is None else max_grad_norm
        self.variable_attrs = VariableAttributes(variables, [*self.defaults, *AdamW._child_vars])


class RMSprop(Optimizer, torch.optim.RMSprop):
    """``poptorch.optim.RMSprop`` (no ``max_grad_norm``, as in poptorch 3.4).

    ``use_tf_variant=True`` computes TensorFlow's variant on the device (:class:`TensorFlowRMSprop`).

    Example:
        >>> RMSprop(torch.nn.Linear(2, 1).parameters(), lr=0.01).loss_scaling
        1.0
    """

    _child_vars = ("loss_scaling",)
    _child_only = (
        *_child_vars,
        *_ACCUMULATOR_ATTRIBUTES,
        "use_tf_variant",
    )
    _group_vars = (
        "lr",
        "momentum",
        "weight_decay",
        "alpha",
        "eps",
        "centered",
    )

    def __init__(
        self,
        params: Iterable[Any],
        lr: float | None = None,
        alpha: float | None = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        momentum: float | None = None,
        centered: bool | None = None,
        foreach: bool | None = None,
        maximize: bool | None = None,
        differentiable: bool | None = None,
        loss_scaling: float | None = None,
        accum_type: torch.dtype | None = None,
        first_order_momentum_accum_type: torch.dtype | None = None,
        second_order_momentum_accum_type: torch.dtype | None = None,
        use_tf_variant: bool | None = None,
    ) -> None:
        torch_args, variables = _split_arguments(locals(), RMSprop._child_only)
        Optimizer.__init__(self)
        torch.optim.RMSprop.__init__(self, **torch_args)
        _init_adaptive(
            self, loss_scaling, accum_type, first_order_momentum_accum_type, second_order_momentum_accum_type
        )
        self.use_tf_variant = bool(use_tf_variant)
        self.variable_attrs = VariableAttributes(variables, [*self.defaults, *RMSprop._child_vars])


class LAMB(Optimizer, torch.optim.Optimizer):
    """``poptorch.optim.LAMB``: layer-wise adaptive moments (You et al., 2019).

    ``max_weight_norm`` caps the weight norm of the trust ratio (default 65500, float16's largest value).

    Its ``step`` is the update the emulated device runs: Adam's moments (bias-corrected unless
    ``bias_correction=False``), plus ``weight_decay`` times the weight, scaled per tensor by
    ``min(|w|, max_weight_norm) / |update|`` (1 when either norm is zero).

    Example:
        >>> opt = LAMB(torch.nn.Linear(2, 1).parameters(), lr=0.01)
        >>> opt.defaults["max_weight_norm"], opt.variable_attrs.isConstant("betas")
        (65500.0, True)
    """

    _child_vars = ("loss_scaling",)
    _child_only = (
        *_child_vars,
        "bias_correction",
        *_ACCUMULATOR_ATTRIBUTES,
    )
    _group_vars = (
        "lr",
        "weight_decay",
        "betas",
        "eps",
        "max_weight_norm",
    )

    def __init__(
        self,
        params: Iterable[Any],
        lr: float | None = None,
        betas: tuple[float, float] | None = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        bias_correction: bool | None = None,
        loss_scaling: float | None = None,
        max_weight_norm: float | None = None,
        accum_type: torch.dtype | None = None,
        first_order_momentum_accum_type: torch.dtype | None = None,
        second_order_momentum_accum_type: torch.dtype | None = None,
    ) -> None:
        _, variables = _split_arguments(
            {
                "lr": lr,
                "betas": betas,
                "eps": eps,
                "weight_decay": weight_decay,
                "bias_correction": bias_correction,
                "loss_scaling": loss_scaling,
                "max_weight_norm": max_weight_norm,
                "accum_type": accum_type,
                "first_order_momentum_accum_type": first_order_momentum_accum_type,
                "second_order_momentum_accum_type": second_order_momentum_accum_type,
            },
            (),
        )
        defaults = {
            "lr": 1e-3 if lr is None else lr,
            "betas": (0.9, 0.999) if betas is None else betas,
            "eps": 1e-8 if eps is None else eps,
            "weight_decay": 1e-2 if weight_decay is None else weight_decay,
            "max_weight_norm": 65500.0 if max_weight_norm is None else max_weight_norm,
        }
        Optimizer.__init__(self)
        torch.optim.Optimizer.__init__(self, params, defaults)
        _init_adaptive(
            self, loss_scaling, accum_type, first_order_momentum_accum_type, second_order_momentum_accum_type
        )
        self.bias_correction = True if bias_correction is None else bias_correction
        self.max_weight_norm = defaults["max_weight_norm"]
        self.variable_attrs = VariableAttributes(variables, [*self.defaults, *LAMB._child_vars])

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One LAMB update of every parameter that has a gradient."""
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                step = float(state["step"])
                state["exp_avg"].lerp_(param.grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
                first = 1 - beta1**step if self.bias_correction else 1.0
                second = 1 - beta2**step if self.bias_correction else 1.0
                update = (state["exp_avg"] / first) / ((state["exp_avg_sq"] / second).sqrt() + group["eps"])
                update.add_(param, alpha=group["weight_decay"])
                weight_norm = param.norm().clamp(max=group["max_weight_norm"])
                update_norm = update.norm()
                trust = 1.0 if weight_norm == 0 or update_norm == 0 else float(weight_norm / update_norm)
                param.add_(update, alpha=-group["lr"] * trust)
        return loss


class TensorFlowRMSprop(torch.optim.Optimizer):
    """The device update of ``RMSprop(use_tf_variant=True)``: TensorFlow's RMSprop, as PopART computes it.

    The squared average starts at ones, ``eps`` is added inside the square root, and with momentum the learning
    rate is applied before the momentum accumulator (popart ``adaptivedecompose.cpp``, ``rmspropTFVariant``).
    Weight decay is added to the gradient (L2).

    Example:
        >>> w = torch.nn.Parameter(torch.ones(1))
        >>> w.grad = torch.ones(1)
        >>> TensorFlowRMSprop([w], lr=0.1, alpha=0.9, eps=0.0).step()
        >>> round(float(w), 4)  # ms = 0.9 + 0.1 = 1, so the step is lr
        0.9
    """

    def __init__(self, params: Iterable[Any], **defaults: Any) -> None:
        base = {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8, "weight_decay": 0.0, "momentum": 0.0, "centered": False}
        super().__init__(params, {**base, **defaults})

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One update of every parameter that has a gradient."""
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            alpha, eps, lr, momentum = group["alpha"], group["eps"], group["lr"], group["momentum"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad.add(param, alpha=group["weight_decay"]) if group["weight_decay"] else param.grad
                state = self.state[param]
                if not state:
                    state["square_avg"] = torch.ones_like(param)
                    if group["centered"]:
                        state["grad_avg"] = torch.zeros_like(param)
                    if momentum or group.get(VELOCITY):
                        # PopART keeps the momentum of a variable momentum, even at 0 (device_optimizers.py).
                        state["momentum_buffer"] = torch.zeros_like(param)
                state["square_avg"].mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                variance = state["square_avg"]
                if group["centered"]:
                    state["grad_avg"].mul_(alpha).add_(grad, alpha=1 - alpha)
                    variance = variance - state["grad_avg"] ** 2
                update = grad / (variance + eps).sqrt()
                if "momentum_buffer" in state:
                    state["momentum_buffer"].mul_(momentum).add_(update, alpha=lr)
                    param.sub_(state["momentum_buffer"])
                else:
                    param.add_(update, alpha=-lr)
        return loss


def check_max_grad_norm(value: float) -> None:
    """A clipping norm must be a positive number (``inf``: no clipping)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value <= 0:
        raise ValueError(f"max_grad_norm must be a positive number, got {value!r}.")
