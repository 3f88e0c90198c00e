"""Lightning's own ``DDPStrategy`` instances, rebuilt as the HPU strategy with the same arguments.

A script written for GPUs passes ``strategy=DDPStrategy(find_unused_parameters=True)`` (or ``static_graph=True``, a
communication hook ...). That class joins its process group with ``device_id``, which the SDK's
``init_process_group`` lacks, and registers hooks on CUDA only, so on HPUs the core asks the HPU strategy for its
equivalent (``from_lightning_strategy``) before launch. The arguments are read back from the attributes Lightning's
``DDPStrategy.__init__`` stores them in (both trees; the Trainer's also keeps the communication hooks).
"""

from __future__ import annotations

from typing import Any

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = ["lightning_ddp_arguments"]


def lightning_ddp_arguments(strategy: Any, precision_argument: str) -> dict[str, Any]:
    """The constructor arguments of Lightning's ``DDPStrategy`` instance ``strategy``.

    Args:
        strategy: An instance of Lightning's ``DDPStrategy`` (Trainer or Fabric).
        precision_argument: The name of the precision argument in this tree (``"precision_plugin"`` for the Trainer,
            ``"precision"`` for Fabric).

    Raises:
        ConfigurationError: For a ``process_group_backend`` other than HCCL's.
    """
    backend = strategy._process_group_backend
    if backend not in (None, sdk.distributed_backend()):
        raise ConfigurationError(
            f"{type(strategy).__name__}(process_group_backend={backend!r}) does not run on HPUs. Accepted: "
            f"process_group_backend={sdk.distributed_backend()!r} or None (HCCL, Gaudi's collective library)."
        )
    precision = strategy._precision_plugin if precision_argument == "precision_plugin" else strategy._precision
    arguments: dict[str, Any] = {
        "accelerator": strategy._accelerator,
        "parallel_devices": strategy.parallel_devices,
        "cluster_environment": strategy.cluster_environment,
        "checkpoint_io": strategy._checkpoint_io,
        precision_argument: precision,
        "timeout": strategy._timeout,
        "start_method": strategy._start_method,
        **strategy._ddp_kwargs,
    }
    if hasattr(strategy, "_ddp_comm_hook"):  # the Trainer's
        arguments.update(
            ddp_comm_state=strategy._ddp_comm_state,
            ddp_comm_hook=strategy._ddp_comm_hook,
            ddp_comm_wrapper=strategy._ddp_comm_wrapper,
            model_averaging_period=strategy._model_averaging_period,
        )
    return arguments
