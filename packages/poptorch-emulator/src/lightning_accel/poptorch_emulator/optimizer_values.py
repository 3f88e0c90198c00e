"""What poptorch hands PopART for an optimizer, and PopART's rule for replacing it after compilation.

poptorch turns the optimizer into ``(value, is_const)`` pairs (``convertOptimizerToDict``, poptorch 3.4
``python/_optimizer_attributes.py:55-270``): for a poptorch optimizer an attribute is constant unless it is marked
variable in ``variable_attrs`` (passed explicitly to the constructor, or ``markAsVariable``); for a torch optimizer
the value decides (``:160-195``): ``lr`` is always variable; ``momentum``, ``dampening`` and ``weight_decay`` are
constant at 0 (AdamW's ``weight_decay`` at 0.01), ``eps`` at 1e-8, LAMB's ``max_weight_norm`` at 65500,
``loss_scaling`` at 1 (unless automatic loss scaling is on); ``betas``, ``alpha`` and ``nesterov`` are always
constant. The global settings (accumulator types, ``max_grad_norm``, ``use_tf_variant``) are compiled in.

PopART accepts a new optimizer after compilation only when every constant keeps its value and constness
(``OptimizerValue::validReplacement``, popart ``willow/src/optimizervalue.cpp``): otherwise it throws
"Values are constant but do not match." or "Can not replace a constant value with a non constant value.".
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, Tuple

import torch

from .errors import Error
from .optim import LAMB

__all__ = ["OptimizerValues", "check_replacement", "optimizer_values"]

Pair = Tuple[Any, bool]
OptimizerValues = Dict[str, Any]

_ALWAYS: Callable[[Any], bool] = lambda value: True  # noqa: E731 - a table entry
_NEVER: Callable[[Any], bool] = lambda value: False  # noqa: E731


def _equal_to(reference: float) -> Callable[[Any], bool]:
    return lambda value: value == reference


# Per kind: the per-group attributes poptorch reads (optim.py's _group_vars) and its global device attributes.
_GROUP_ATTRIBUTES = {
    "SGD": ("lr", "momentum", "dampening", "weight_decay", "nesterov", "velocity_scaling"),
    "Adam": ("lr", "betas", "eps", "weight_decay", "amsgrad"),
    "AdamW": ("lr", "betas", "weight_decay", "eps", "amsgrad"),
    "RMSprop": ("lr", "momentum", "weight_decay", "alpha", "eps", "centered"),
    "LAMB": ("lr", "weight_decay", "betas", "eps", "max_weight_norm"),
}
_ACCUMULATORS = ("accum_type", "first_order_momentum_accum_type", "second_order_momentum_accum_type")
_GLOBAL_ATTRIBUTES = {
    "SGD": ("use_combined_accum", "accum_type", "velocity_accum_type", "max_grad_norm"),
    "Adam": (*_ACCUMULATORS, "max_grad_norm"),
    "AdamW": ("bias_correction", *_ACCUMULATORS, "max_grad_norm"),
    "RMSprop": (*_ACCUMULATORS, "use_tf_variant"),
    "LAMB": ("bias_correction", *_ACCUMULATORS),
}
_GLOBAL_DEFAULTS: dict[str, Any] = {
    "use_combined_accum": False,
    "accum_type": torch.float32,
    "velocity_accum_type": torch.float32,
    "first_order_momentum_accum_type": torch.float32,
    "second_order_momentum_accum_type": torch.float32,
    "max_grad_norm": float("inf"),
    "use_tf_variant": False,
    "bias_correction": True,
}
_IGNORED = frozenset({"amsgrad", "centered"})
_SUPPORTED = ", ".join(
    f"_OptimizerType.{name}"
    for name in (
        "SGD1",
        "SGD2",
        "ADAM",
        "ADAMW",
        "ADAMW_NO_BIAS",
        "RMSPROP",
        "RMSPROP_CENTERED",
        "LAMB",
        "LAMB_NO_BIAS",
    )
)


def kind_of(optimizer: torch.optim.Optimizer) -> str | None:
    """Poptorch's optimizer kind (``_toPoptorchOptimizer``), or ``None`` for an unsupported type."""
    # AdamW first: from torch 2.6 on, torch's AdamW subclasses Adam.
    for kind, name in (
        (torch.optim.AdamW, "AdamW"),
        (torch.optim.Adam, "Adam"),
        (torch.optim.RMSprop, "RMSprop"),
        (torch.optim.SGD, "SGD"),
        (LAMB, "LAMB"),
    ):
        if isinstance(optimizer, kind):
            return name
    return None


def _const_rule(kind: str, name: str) -> Callable[[Any], bool]:
    if name == "lr":
        return _NEVER
    if name in ("betas", "alpha", "nesterov"):
        return _ALWAYS
    references = {"momentum": 0.0, "dampening": 0.0, "velocity_scaling": 1.0, "eps": 1e-08, "max_weight_norm": 65500.0}
    if name == "weight_decay":
        return _equal_to(1e-2 if kind == "AdamW" else 0.0)
    return _equal_to(references[name])


def _number(value: Any, name: str) -> None:
    assert isinstance(value, numbers.Number), f"Expected a number for {name} but got {value} instead"


def _pairs(kind: str, source: dict[str, Any], variable_attrs: Any) -> dict[str, Pair]:
    """The ``(value, is_const)`` of every per-group attribute of one group (or of the defaults)."""
    pairs: dict[str, Pair] = {}
    for name in _GROUP_ATTRIBUTES[kind]:
        if name == "amsgrad":
            if source.get("amsgrad"):
                raise ValueError("Only non-amsgrad Adam/AdamW optimizers are supported.")
            continue
        if name in _IGNORED:
            continue
        default = 1.0 if name == "velocity_scaling" else None
        value = source.get(name, default)
        assert value is not None, f"Mandatory attribute {name} not found in optimizer group"
        if name == "betas":
            assert isinstance(value, tuple) and len(value) == 2, f"Expected a pair for betas but got {value} instead"
            _number(value[0], "betas[0]")
            _number(value[1], "betas[1]")
        else:
            _number(value, name)
        is_const = variable_attrs.isConstant(name) if variable_attrs else _const_rule(kind, name)(value)
        if name == "betas":
            pairs["beta1"] = (value[0], is_const)
            pairs["beta2"] = (value[1], is_const)
        else:
            pairs[name] = (value, is_const)
    return pairs


def optimizer_values(optimizer: torch.optim.Optimizer, automatic_loss_scaling: bool) -> OptimizerValues:
    """What poptorch sends PopART for ``optimizer``: its kind, global attributes, defaults and groups.

    Raises:
        AssertionError: For a value that is not a number, or ``betas`` that is not a pair of numbers (poptorch
            asserts, ``_optimizer_attributes.py:389-391, 468-484``).
        ValueError: For ``amsgrad=True``.
    """
    kind = kind_of(optimizer)
    # poptorch's text, where the types are those of its _OptimizerType (_optimizer_attributes.py:23-26, 273-282).
    assert kind is not None, f"Unsupported optimizer type. Types supported {_SUPPORTED}"
    variable_attrs = getattr(optimizer, "variable_attrs", None)
    if variable_attrs is not None and automatic_loss_scaling:
        # Automatic loss scaling needs a variable loss scale (_optimizer_attributes.py:155-159).
        variable_attrs.markAsVariable("loss_scaling")
    loss_scaling = getattr(optimizer, "loss_scaling", 1.0)
    _number(loss_scaling, "loss_scaling")
    if variable_attrs:
        loss_const = variable_attrs.isConstant("loss_scaling")
    else:
        loss_const = loss_scaling == 1.0 and not automatic_loss_scaling
    defaults = _pairs(kind, optimizer.defaults, variable_attrs)
    defaults["loss_scaling"] = (loss_scaling, loss_const)
    return {
        "kind": kind,
        "attributes": {name: getattr(optimizer, name, _GLOBAL_DEFAULTS[name]) for name in _GLOBAL_ATTRIBUTES[kind]},
        "defaults": defaults,
        "groups": [_pairs(kind, group, variable_attrs) for group in optimizer.param_groups],
    }


def _replace(where: str, old: Pair, new: Pair) -> None:
    if old[1] != new[1]:
        raise Error("Can not replace a constant value with a non constant value.", "popart_exception")
    if old[1] and float(old[0]) != float(new[0]):
        raise Error("Values are constant but do not match.", "popart_exception")


def check_replacement(compiled: OptimizerValues, new: OptimizerValues) -> None:
    """Raise PopART's error when ``new`` changes a constant of the ``compiled`` optimizer.

    Raises:
        Error: PopART's text; the global attributes and the kind count as constants.
    """
    if compiled["kind"] != new["kind"] or compiled["attributes"] != new["attributes"]:
        raise Error("Values are constant but do not match.", "popart_exception")
    if len(compiled["groups"]) != len(new["groups"]):
        raise Error(
            f"setOptimizer: the new optimizer has {len(new['groups'])} parameter groups but the model was compiled "
            f"with {len(compiled['groups'])}; create a new trainingModel instead."
        )
    sections: list[tuple[str, dict[str, Pair], dict[str, Pair]]] = [("defaults", compiled["defaults"], new["defaults"])]
    sections.extend((f"group {i}", old, now) for i, (old, now) in enumerate(zip(compiled["groups"], new["groups"])))
    for where, old_pairs, new_pairs in sections:
        for name, old in old_pairs.items():
            _replace(f"{where} {name}", old, new_pairs[name])
