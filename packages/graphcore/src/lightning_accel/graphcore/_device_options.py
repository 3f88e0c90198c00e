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

    A value the user left at its default takes the Trainer's (``replicas``: the stage's replication factor, which
    the strategy takes from these options when they set one); a device iteration or accumulation the user set that
    contradicts the Trainer is an error rather than a silent choice. With replicas, buffers are not broadcast
    (``broadcastBuffers(False)``): poptorch compiles a model that writes its buffers (BatchNorm) with replicas only
    then.

    Raises:
        ConfigurationError: When the user's options contradict ``device_iterations`` or
            ``accumulate_grad_batches``.
    """
    opts = user.clone() if user is not None else poptorch.Options()
    if opts.replication_factor == 1:
        # The stage's replicas (_replication.py): a factor the options set is theirs already.
        opts.replicationFactor(replicas)
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
    if opts.input_group_size < opts.replication_factor and opts.broadcast_buffers:
        # poptorch refuses every in-place write to a buffer (BatchNorm's num_batches_tracked and running statistics)
        # when replicas broadcast their buffers, its default (InplaceOps.cpp:226-233, options.py:1182); it only
        # supports buffers that each replica keeps for itself (options.py:1508-1516). Broadcasting changes nothing
        # for a model that never writes its buffers, so replicas always keep their own: each replica's BatchNorm
        # statistics follow its own micro-batches, and the host (checkpoints) reads replica 0's.
        opts.broadcastBuffers(False)
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


# The numeric hyper-parameters of each torch optimizer that poptorch reads (poptorch 3.4 optim.py's _group_vars).
_HYPERPARAMETERS: dict[type[torch.optim.Optimizer], tuple[str, ...]] = {
    torch.optim.SGD: ("lr", "momentum", "dampening", "weight_decay"),
    torch.optim.Adam: ("lr", "betas", "eps", "weight_decay"),
    torch.optim.AdamW: ("lr", "betas", "eps", "weight_decay"),
    torch.optim.RMSprop: ("lr", "alpha", "eps", "weight_decay", "momentum"),
}
# A momentum of 0 stays a constant unless a scheduler changes it: PopART then keeps no velocity tensor per weight
# (poptorch 3.4 optim.py:119-121; popart sgd2decompose.cpp), which a variable momentum would need.
_OMITTED_AT = {"momentum": 0.0}


def _changing_hyperparameters(schedulers: list[Any]) -> set[str]:
    """The hyper-parameters other than ``lr`` that Lightning's configured schedulers change."""
    changing: set[str] = set()
    for scheduler in schedulers:
        if getattr(scheduler, "cycle_momentum", False):
            # OneCycleLR and CyclicLR cycle SGD/RMSprop's momentum or Adam's beta1.
            changing.update(("momentum", "betas"))
    return changing


def _as_pair(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def device_optimizer(
    optimizer: Any, poptorch: ModuleType, max_grad_norm: float | None, schedulers: list[Any] | None = None
) -> Any:
    """The optimizer poptorch runs for ``optimizer``: the user's own ``poptorch.optim`` one, or a twin of a torch one.

    A ``poptorch.optim`` optimizer is used as it is (its accumulator types, scalings and ``variable_attrs``). A torch
    optimizer gets a ``poptorch.optim`` twin with the same parameter groups, whose hyper-parameters are passed
    explicitly, which makes them variable (poptorch 3.4 ``optim.py:50-64``): a learning-rate, momentum, betas or
    weight-decay schedule can then change them after compilation. Only a momentum of 0 that no configured scheduler
    cycles stays a constant, so that PopART keeps no velocity tensor per weight.

    Raises:
        ConfigurationError: For an optimizer type IPUs do not support, ``amsgrad=True``, ``maximize=True``,
            ``betas`` that are not a pair, or gradient clipping with an optimizer that cannot clip.
    """
    _check_groups(optimizer)
    if isinstance(optimizer, poptorch.optim.Optimizer):
        return _user_device_optimizer(optimizer, max_grad_norm)
    found = [(kind, twin) for kind, twin in _optimizer_kinds(poptorch) if isinstance(optimizer, kind)]
    if not found:
        raise ConfigurationError(
            f"The optimizer {type(optimizer).__name__} is not supported on IPUs. Accepted: torch.optim.SGD, Adam, "
            "AdamW, RMSprop, or poptorch.optim's SGD, Adam, AdamW, RMSprop and LAMB; change configure_optimizers."
        )
    kind, device_kind = found[0]
    groups = [
        {**group, "betas": _as_pair(group["betas"])} if "betas" in group else dict(group)
        for group in optimizer.param_groups
    ]
    changing = _changing_hyperparameters(schedulers or [])
    explicit: dict[str, Any] = {}
    for name in _HYPERPARAMETERS[kind]:
        value = _as_pair(optimizer.defaults.get(name))
        trivial = name in _OMITTED_AT and all(group.get(name) == _OMITTED_AT[name] for group in groups)
        if value is not None and (not trivial or name in changing):
            explicit[name] = value
    if max_grad_norm is not None:
        if "max_grad_norm" not in inspect.signature(device_kind).parameters:
            raise ConfigurationError(
                f"Gradient clipping (Trainer(gradient_clip_val={max_grad_norm})) is not available with "
                f"{type(optimizer).__name__} on IPUs: poptorch.optim.{device_kind.__name__} has no max_grad_norm. "
                "Use SGD, Adam or AdamW, or train without gradient_clip_val."
            )
        explicit["max_grad_norm"] = max_grad_norm
    return device_kind(groups, **explicit)


def _check_groups(optimizer: Any) -> None:
    for index, group in enumerate(optimizer.param_groups):
        if group.get("amsgrad"):
            raise ConfigurationError("Adam(amsgrad=True) is not supported on IPUs: pass amsgrad=False.")
        if group.get("maximize"):
            raise ConfigurationError(
                f"{type(optimizer).__name__}(maximize=True) is not supported on IPUs: poptorch never reads maximize, "
                "so the IPU would descend. Return the negated objective as the loss instead."
            )
        betas = group.get("betas")
        if betas is not None and not (
            isinstance(betas, (tuple, list)) and len(betas) == 2 and all(isinstance(b, (int, float)) for b in betas)
        ):
            raise ConfigurationError(
                f"{type(optimizer).__name__} parameter group {index} has betas={betas!r}: pass a pair of numbers, "
                "e.g. betas=(0.9, 0.999)."
            )


def _user_device_optimizer(optimizer: Any, max_grad_norm: float | None) -> Any:
    """The user's ``poptorch.optim`` optimizer, checked for what poptorch would refuse once running."""
    for index, group in enumerate(optimizer.param_groups):
        if isinstance(group.get("betas"), list):
            # poptorch asserts a tuple (_optimizer_attributes.py:468-484) when the model is built.
            raise ConfigurationError(
                f"{type(optimizer).__name__} parameter group {index} has betas={group['betas']!r} (a list, as "
                "YAML/Hydra configs give it): poptorch.optim needs a tuple. Pass betas=tuple(...) in "
                "configure_optimizers."
            )
    if max_grad_norm is not None:
        own = getattr(optimizer, "max_grad_norm", None)
        if own is None:
            raise ConfigurationError(
                f"Gradient clipping (Trainer(gradient_clip_val={max_grad_norm})) is not available with "
                f"poptorch.optim.{type(optimizer).__name__}: it has no max_grad_norm. Use SGD, Adam or AdamW, or "
                "train without gradient_clip_val."
            )
        if own != max_grad_norm:
            raise ConfigurationError(
                f"Trainer(gradient_clip_val={max_grad_norm}) and poptorch.optim.{type(optimizer).__name__}"
                f"(max_grad_norm={own}) disagree: poptorch clips with the optimizer's max_grad_norm. Set "
                f"max_grad_norm={max_grad_norm} on the optimizer, or leave gradient_clip_val unset."
            )
    return optimizer


def sync_hyperparameters(source: Any, target: Any) -> None:
    """Copy the hyper-parameters of every parameter group (learning rate after a scheduler step, ...)."""
    if source is target:
        return
    for group, twin in strict_zip(source.param_groups, target.param_groups):
        for key, value in group.items():
            if key != "params":
                twin[key] = _as_pair(value) if key == "betas" else value
