"""Data-parallel training over HCCL, on one or more nodes."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.strategies import DDPStrategy
from torch.nn.parallel import DistributedDataParallel
from typing_extensions import override

from lightning_accel.core.compat import register_ddp_comm_hook

from .._comm_hooks import hook_for_hccl
from .._compile_default_backend import TrainerCompilesWithHPUBackend
from .._from_lightning import lightning_ddp_arguments
from .._hccl_strategy import HCCLStrategyMixin
from .._lazy import MarkStepAfterUpdates, MarkStepAroundEvaluation
from .._strategy_defaults import HPUCheckpointIODefault
from ._precision import HPUPrecisionSetter

__all__ = ["HPUParallelStrategy"]


class HPUParallelStrategy(
    TrainerCompilesWithHPUBackend,
    HCCLStrategyMixin,
    HPUPrecisionSetter,
    HPUCheckpointIODefault,
    MarkStepAfterUpdates,
    MarkStepAroundEvaluation,
    DDPStrategy,
):
    """Distributed data parallel over HCCL (``strategy="hpu_parallel"``, also ``"hpu_ddp"``).

    One process per HPU; several nodes through ``num_nodes`` and Lightning's cluster environments (the variables
    ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``NODE_RANK``; torchrun; SLURM). ``reduce`` supports sum, mean,
    min and max. Evaluation runs under ``torch.no_grad``. The HPU set-up, the process group (joined without an
    index-less ``device_id``), reductions and teardown come from
    :class:`~lightning_accel.habana.distributed.HCCLStrategyMixin`; a non-HPU accelerator is refused. The constructor
    and its arguments are Lightning's ``DDPStrategy``'s, unchanged.

    Args:
        accelerator: The accelerator (normally set by the Trainer).
        parallel_devices: The HPUs of this node, e.g. ``[torch.device("hpu")] * 8``; the Trainer's ``devices`` by
            default.
        cluster_environment: How processes find each other (Lightning picks one by default).
        checkpoint_io: Checkpoint I/O; :class:`HPUCheckpointIO` by default.
        precision_plugin: Precision plugin; Lightning's plugin for ``precision=`` becomes an
            :class:`~lightning_accel.habana.HPUPrecisionPlugin`.
        process_group_backend: The ``torch.distributed`` backend: HCCL's ``"hccl"`` where it is None (the default).
        timeout: Timeout of collective operations.
        start_method: How Lightning starts the processes of this node (``"popen"`` re-runs the script).
        ddp_comm_state: The state of ``ddp_comm_hook``, as for Lightning's ``DDPStrategy``.
        ddp_comm_hook: A DDP communication hook (``torch.distributed.algorithms.ddp_comm_hooks``), registered on the
            HPU model as Lightning registers it on GPUs. HCCL reduces float32 and bfloat16 natively and float16 as
            float32, so ``bf16_compress_hook`` halves the gradient traffic and ``fp16_compress_hook`` does not. torch's
            bfloat16 hooks, which torch's DDP refuses by name off NCCL, are accepted on HCCL as given.
        ddp_comm_wrapper: A wrapper of ``ddp_comm_hook`` (e.g. ``fp16_compress_wrapper``).
        model_averaging_period: Post-localSGD's averaging period, with ``post_localSGD_hook`` and its state.
        **kwargs: Passed to :class:`torch.nn.parallel.DistributedDataParallel`.

    Example:
        >>> import torch
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUAccelerator, HPUParallelStrategy
        >>> strategy = HPUParallelStrategy(parallel_devices=[torch.device("hpu")] * 2)
        >>> trainer = Trainer(accelerator=HPUAccelerator(), strategy=strategy, devices=2)  # doctest: +SKIP
    """

    strategy_name = "hpu_parallel"

    @classmethod
    def from_lightning_strategy(cls, strategy: DDPStrategy) -> HPUParallelStrategy:
        """This strategy with the arguments of Lightning's ``DDPStrategy(...)`` instance ``strategy``.

        The core calls it for ``Trainer(accelerator="hpu", strategy=DDPStrategy(...))``, so a GPU script's instance
        runs on HPUs as the name ``"ddp"`` does.

        Raises:
            ConfigurationError: For a ``process_group_backend`` other than ``"hccl"``.
        """
        return cls(**lightning_ddp_arguments(strategy, "precision_plugin"))

    @override
    def _register_ddp_hooks(self) -> None:
        # Lightning registers the hooks only for "cuda"; torch's hooks run on any process group, HCCL's included.
        if not isinstance(self.model, DistributedDataParallel):
            return
        from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState

        state = self._ddp_comm_state
        if isinstance(state, PostLocalSGDState) and state.subgroup is None:
            # torch makes post-localSGD's intra-node groups from torch.cuda.device_count(), which is 0 beside HPUs:
            # the groups are this node's processes, one per HPU.
            state.subgroup, _ = torch.distributed.new_subgroups(group_size=self.num_processes)
        # torch refuses its bfloat16 hooks by name off NCCL/XCCL; HCCL reduces bfloat16 (see _comm_hooks).
        hook, wrapper = hook_for_hccl(self._ddp_comm_hook, self._ddp_comm_wrapper)
        register_ddp_comm_hook(self.model, state, hook, wrapper)

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"hpu_parallel"`` and ``"hpu_ddp"`` (the core does this from the plugin spec)."""
        for name in (cls.strategy_name, "hpu_ddp"):
            strategy_registry.register(name, cls, description=cls.__name__, override=True)
