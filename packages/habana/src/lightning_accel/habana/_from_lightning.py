"""Lightning's own ``DDPStrategy``, ``FSDPStrategy`` and ``ModelParallelStrategy`` instances, rebuilt as HPU strategies.

A script written for GPUs passes ``strategy=DDPStrategy(find_unused_parameters=True)`` (or ``static_graph=True``, a
communication hook ...) or ``FSDPStrategy(auto_wrap_policy=..., sharding_strategy=...)``. Those classes join their
process group with ``device_id`` (which a bound group's ``DeviceMesh`` then splits, refused by HCCL; SDK 1.19 even
lacked the parameter), and set up CUDA (hooks, FSDP's
device), so on HPUs the core asks the HPU strategy for its equivalent (``from_lightning_strategy``) before launch.
The arguments are read back from the attributes Lightning's ``__init__`` stores them in (both trees).
"""

from __future__ import annotations

from typing import Any, TypeVar

from lightning_accel.core.errors import ConfigurationError

from . import sdk

_Strategy = TypeVar("_Strategy")

__all__ = [
    "lightning_ddp_arguments",
    "lightning_fsdp_arguments",
    "lightning_model_parallel_arguments",
    "rebuild_fsdp",
]


def _common_arguments(strategy: Any, precision_argument: str) -> dict[str, Any]:
    """The arguments every Lightning parallel strategy of either tree stores; the backend checked."""
    backend = strategy._process_group_backend
    if backend not in (None, sdk.distributed_backend()):
        raise ConfigurationError(
            f"{type(strategy).__name__}(process_group_backend={backend!r}) does not run on HPUs. Accepted: "
            f"process_group_backend={sdk.distributed_backend()!r} or None (HCCL, Gaudi's collective library)."
        )
    trainer = precision_argument == "precision_plugin"
    arguments: dict[str, Any] = {
        "accelerator": strategy._accelerator,
        "parallel_devices": strategy.parallel_devices,
        "cluster_environment": strategy.cluster_environment,
        precision_argument: strategy._precision_plugin if trainer else strategy._precision,
        "timeout": strategy._timeout,
    }
    if trainer or hasattr(strategy, "_ddp_kwargs"):  # Fabric's FSDP takes no checkpoint_io
        arguments["checkpoint_io"] = strategy._checkpoint_io
    return arguments


def lightning_ddp_arguments(strategy: Any, precision_argument: str) -> dict[str, Any]:
    """The constructor arguments of Lightning's ``DDPStrategy`` instance ``strategy``.

    Args:
        strategy: An instance of Lightning's ``DDPStrategy`` (Trainer or Fabric).
        precision_argument: The name of the precision argument in this tree (``"precision_plugin"`` for the Trainer,
            ``"precision"`` for Fabric).

    Raises:
        ConfigurationError: For a ``process_group_backend`` other than HCCL's.
    """
    arguments = _common_arguments(strategy, precision_argument)
    arguments.update(start_method=strategy._start_method, **strategy._ddp_kwargs)
    if hasattr(strategy, "_ddp_comm_hook"):  # the Trainer's
        arguments.update(
            ddp_comm_state=strategy._ddp_comm_state,
            ddp_comm_hook=strategy._ddp_comm_hook,
            ddp_comm_wrapper=strategy._ddp_comm_wrapper,
            model_averaging_period=strategy._model_averaging_period,
        )
    return arguments


def lightning_fsdp_arguments(strategy: Any, precision_argument: str) -> dict[str, Any]:
    """The constructor arguments of Lightning's ``FSDPStrategy`` instance ``strategy``.

    Its ``auto_wrap_policy`` and ``device_mesh`` are among the FSDP keywords Lightning keeps; its activation
    checkpointing, which Lightning keeps only in a form its constructor does not take, is copied by
    :func:`rebuild_fsdp`.

    Raises:
        ConfigurationError: For a ``process_group_backend`` other than HCCL's.
    """
    arguments = _common_arguments(strategy, precision_argument)
    fsdp_kwargs = strategy.kwargs if precision_argument == "precision_plugin" else strategy._fsdp_kwargs
    arguments.update(
        cpu_offload=strategy.cpu_offload,
        mixed_precision=strategy.mixed_precision,
        sharding_strategy=strategy.sharding_strategy,
        state_dict_type=strategy._state_dict_type,
        **fsdp_kwargs,
    )
    return arguments


def rebuild_fsdp(cls: type[_Strategy], strategy: Any, precision_argument: str) -> _Strategy:
    """The HPU FSDP strategy ``cls`` of one tree, built with the arguments of Lightning's ``FSDPStrategy`` instance.

    Raises:
        ConfigurationError: For a ``process_group_backend`` other than HCCL's, or arguments ``cls`` refuses.
    """
    converted = cls(**lightning_fsdp_arguments(strategy, precision_argument))
    converted._activation_checkpointing_kwargs = strategy._activation_checkpointing_kwargs  # type: ignore[attr-defined]
    return converted


def lightning_model_parallel_arguments(strategy: Any, precision_argument: str) -> dict[str, Any]:
    """The constructor arguments of Lightning's ``ModelParallelStrategy`` instance ``strategy`` (Trainer or Fabric).

    Raises:
        ConfigurationError: For a ``process_group_backend`` other than HCCL's.
    """
    arguments = _common_arguments(strategy, precision_argument)
    arguments.update(
        data_parallel_size=strategy._data_parallel_size,
        tensor_parallel_size=strategy._tensor_parallel_size,
        save_distributed_checkpoint=strategy._save_distributed_checkpoint,
    )
    if precision_argument == "precision":  # Fabric's applies the parallelization itself
        arguments["parallelize_fn"] = strategy._parallelize_fn
    return arguments
