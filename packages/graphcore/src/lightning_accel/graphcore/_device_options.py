"""The poptorch options and device optimizer a strategy derives from the Trainer's settings."""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.pycompat import strict_zip

__all__ = ["device_optimizer", "resolve_options", "sync_hyperparameters"]


def resolve_options(
    user: Any,
    poptorch: ModuleType,
    *,
    argument: str,
    training: bool,
    replicas: int,
    device_iterations: int,
    accumulation: int,
    seed: int | None,
    model_name: str,
) -> Any:
    """A fresh ``poptorch.Options`` for one stage: the user's (cloned) with the Trainer's settings filled in.

    A value the user left at its default takes the Trainer's; a value the user set that contradicts the Trainer is
    an error rather than a silent choice.

    Raises:
        ConfigurationError: When the user's options contradict ``devices``, ``device_iterations`` or
            ``accumulate_grad_batches``.
    """
    opts = user.clone() if user is not None else poptorch.Options()
    if opts.replication_factor == 1:
        opts.replicationFactor(replicas)
    elif opts.replication_factor != replicas:
        raise ConfigurationError(
            f"{argument}.replicationFactor({opts.replication_factor}) contradicts Trainer(devices={replicas}): with "
            f"IPUs, devices is the number of replicas. Pass devices={opts.replication_factor} or leave the "
            "replication factor of the options at its default."
        )
    if device_iterations != 1:
        if opts.device_iterations == 1:
            opts.deviceIterations(device_iterations)
        elif opts.device_iterations != device_iterations:
            raise ConfigurationError(
                f"{argument}.deviceIterations({opts.device_iterations}) contradicts "
                f"IPUStrategy(device_iterations={device_iterations}); set one of them only."
            )
    current = opts.Training.gradient_accumulation
    if training:
        if accumulation != 1:
            if current == 1:
                opts.Training.gradientAccumulation(accumulation)
            elif current != accumulation:
                raise ConfigurationError(
                    f"{argument}.Training.gradientAccumulation({current}) contradicts "
                    f"Trainer(accumulate_grad_batches={accumulation}); set one of them only."
                )
    elif current != 1:
        raise ConfigurationError(
            f"{argument}.Training.gradientAccumulation({current}) is not accepted for inference: leave it at 1 and "
            "raise deviceIterations instead to feed a pipeline."
        )
    if seed is not None and not opts.exists("random_seed"):
        # createOrSet, not randomSeed(): the latter would also reseed torch in the middle of the run.
        opts.createOrSet(random_seed=seed)
    opts.modelName(model_name)
    return opts


def _optimizer_kinds(poptorch: ModuleType) -> list[tuple[type[torch.optim.Optimizer], Any]]:
    # AdamW before Adam: AdamW may subclass Adam.
    return [
        (torch.optim.AdamW, poptorch.optim.AdamW),
        (torch.optim.Adam, poptorch.optim.Adam),
        (torch.optim.RMSprop, poptorch.optim.RMSprop),
        (torch.optim.SGD, poptorch.optim.SGD),
    ]


def device_optimizer(optimizer: Any, poptorch: ModuleType, max_grad_norm: float | None) -> Any:
    """A ``poptorch.optim`` twin of ``optimizer`` (same parameters and hyper-parameters) with ``max_grad_norm``.

    Raises:
        ConfigurationError: For an optimizer type IPUs do not support.
    """
    device_kind = next((twin for kind, twin in _optimizer_kinds(poptorch) if isinstance(optimizer, kind)), None)
    if device_kind is None:
        raise ConfigurationError(
            f"The optimizer {type(optimizer).__name__} is not supported on IPUs. Accepted: torch.optim.SGD, Adam, "
            "AdamW, RMSprop (or their poptorch.optim versions); change configure_optimizers."
        )
    groups = [dict(group) for group in optimizer.param_groups]
    if any(group.get("amsgrad") for group in groups):
        raise ConfigurationError("Adam(amsgrad=True) is not supported on IPUs: pass amsgrad=False.")
    extras: dict[str, Any] = {"loss_scaling": getattr(optimizer, "loss_scaling", None)}
    if max_grad_norm is None:
        max_grad_norm = getattr(optimizer, "max_grad_norm", None)
    if max_grad_norm is not None:
        if "max_grad_norm" not in inspect.signature(device_kind).parameters:
            raise ConfigurationError(
                f"Gradient clipping (Trainer(gradient_clip_val={max_grad_norm})) is not available with "
                f"{type(optimizer).__name__} on IPUs: poptorch.optim.{device_kind.__name__} has no max_grad_norm. "
                "Use SGD, Adam or AdamW, or train without gradient_clip_val."
            )
        extras["max_grad_norm"] = max_grad_norm
    return device_kind(groups, lr=groups[0]["lr"], **extras)


def sync_hyperparameters(source: Any, target: Any) -> None:
    """Copy the hyper-parameters of every parameter group (learning rate after a scheduler step, ...)."""
    for group, twin in strict_zip(source.param_groups, target.param_groups):
        for key, value in group.items():
            if key != "params":
                twin[key] = value
