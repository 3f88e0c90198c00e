"""Checks of the user's optimizer against what poptorch does with it, and the errors that say how to fix it."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

__all__ = ["check_every_weight_is_optimized", "hyperparameters", "refused_change_message"]

_SHOWN = 5


def check_every_weight_is_optimized(module: torch.nn.Module, optimizer: Any) -> None:
    """Refuse trainable weights that are outside the optimizer's parameter groups.

    PopART's optimizer updates every trainable weight, those in no group with the optimizer's defaults (poptorch
    3.4 ``_poplar_executor.py:830-836`` tags only the grouped ones; ``popart_compiler/source/CompilerImpl.cpp:791-866``
    builds the optimizer from the defaults): such a weight would train on IPUs and stay as it is on other devices.

    Raises:
        ConfigurationError: Naming the weights and the two fixes.
    """
    grouped = {id(param) for group in optimizer.param_groups for param in group["params"]}
    missing = [name for name, param in module.named_parameters() if param.requires_grad and id(param) not in grouped]
    if not missing:
        return
    shown = ", ".join(missing[:_SHOWN]) + (f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else "")
    raise ConfigurationError(
        f"The trainable parameters {shown} are not in the optimizer returned by configure_optimizers. On IPUs "
        "poptorch updates every trainable weight, those outside the optimizer's parameter groups with its default "
        f"hyper-parameters (lr={optimizer.defaults.get('lr')}), so they would train on IPUs and not elsewhere. Freeze "
        "them with param.requires_grad_(False), or add them to the optimizer."
    )


def hyperparameters(optimizer: Any) -> list[dict[str, Any]]:
    """A copy of every parameter group's hyper-parameters (no parameters)."""
    return [{key: value for key, value in group.items() if key != "params"} for group in optimizer.param_groups]


def refused_change_message(
    host: Any, device: Any, accepted: list[dict[str, Any]], error: BaseException, poptorch: ModuleType
) -> str:
    """Why poptorch refused the optimizer's new values: which constant changed, and how to make it variable.

    poptorch compiles every hyper-parameter not passed explicitly to a ``poptorch.optim`` constructor as a constant
    (``optim.py:50-64``), and PopART refuses a new value for a constant ("Values are constant but do not match.",
    popart ``willow/src/optimizervalue.cpp``).
    """
    variable_attrs = getattr(device, "variable_attrs", None)
    changes = []
    for index, (before, group) in enumerate(zip(accepted, device.param_groups)):
        for key, old in before.items():
            new = group.get(key)
            # Keys poptorch does not read (initial_lr, max_lr, ...) cannot be refused.
            constant = variable_attrs is None or (key in _known(variable_attrs) and variable_attrs.isConstant(key))
            if new != old and constant:
                changes.append((index, key, old, new))
    reason = getattr(error, "message", None) or str(error)
    kind = type(device).__name__
    if not changes:
        return (
            f"poptorch refused the optimizer's new hyper-parameters during fit: {reason}. Hyper-parameters that change "
            f"after compilation must be variable: pass them explicitly to poptorch.optim.{kind}(...)."
        )
    index, key, old, new = changes[0]
    what = f"The optimizer's {key} changed from {old!r} to {new!r} (parameter group {index})"
    if device is host:
        fix = (
            f"Pass {key}=... explicitly to poptorch.optim.{kind}(...) in configure_optimizers (explicit "
            f"hyper-parameters are variable), or call optimizer.variable_attrs.markAsVariable({key!r}) there."
        )
    else:
        fix = (
            f"Give {key} a non-zero starting value in configure_optimizers, or return poptorch.optim.{kind}(..., "
            f"{key}=...) with {key} given explicitly (explicit hyper-parameters are variable)."
        )
    return (
        f"{what} after the IPU training model was compiled, but poptorch compiled {key} in as a constant, and PopART "
        f"refuses the change ({reason}). {fix}"
    )


def _known(variable_attrs: Any) -> list[str]:
    return list(getattr(variable_attrs, "_allowed_attributes", []))
