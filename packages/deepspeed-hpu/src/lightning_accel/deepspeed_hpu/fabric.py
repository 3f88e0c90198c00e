"""``HPUDeepSpeedStrategy`` for Fabric: Lightning's Fabric DeepSpeed strategy on Intel Gaudi, and on its emulator."""

from __future__ import annotations

import argparse
import copy
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.plugins.precision import DeepSpeedPrecision, Precision
from lightning.fabric.strategies import DDPStrategy, DeepSpeedStrategy
from lightning.fabric.utilities.seed import reset_seed
from typing_extensions import override

from lightning_accel.core.checkpoint_swap import StagedFabricCheckpoints
from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import sdk
from lightning_accel.habana.distributed import HCCLStrategyMixin, MarkStepAfterUpdates

from . import config as ds_config
from ._runtime import check_deepspeed_accelerator, check_process_group_backend, prepare_deepspeed_import

if TYPE_CHECKING:
    import deepspeed
    from lightning.fabric.accelerators import Accelerator
    from lightning.fabric.plugins import ClusterEnvironment
    from torch.nn import Module
    from torch.optim import Optimizer

    from lightning_accel.core.compat import PathType

__all__ = ["HPUDeepSpeedStrategy"]


class HPUDeepSpeedStrategy(StagedFabricCheckpoints, HCCLStrategyMixin, MarkStepAfterUpdates, DeepSpeedStrategy):
    """Fabric's DeepSpeed (ZeRO 1/2/3, offload, bf16) on HPUs: ``Fabric(accelerator="hpu", strategy="deepspeed")``.

    A subclass of Lightning's :class:`~lightning.fabric.strategies.DeepSpeedStrategy` taking the same arguments, as
    the Trainer's :class:`~lightning_accel.deepspeed_hpu.HPUDeepSpeedStrategy` is of the Trainer's. With
    ``accelerator="hpu"``, Lightning's names (``"deepspeed"``, ``"deepspeed_stage_3"`` ...) and an instance of
    Lightning's Fabric ``DeepSpeedStrategy(...)`` become this strategy; ``"hpu_deepspeed*"`` name it directly. It runs
    DeepSpeed's HPU accelerator (``DS_ACCELERATOR=hpu``) over HCCL, each process on the HPU of its local rank;
    ``fabric.init_module()`` is DeepSpeed's ``zero.Init`` under ZeRO-3. ``fabric.save`` writes DeepSpeed's checkpoint
    folder aside and swaps it in once every rank has written
    (:class:`~lightning_accel.core.checkpoint_swap.StagedFabricCheckpoints`); ``fabric.load`` restores the engine,
    its optimizer and the rest of the state.

    As with the Trainer's strategy, a config and a ZeRO argument that contradict each other are an error (Lightning
    would ignore the argument), and the precision is Fabric's ``precision=`` (``"bf16-mixed"`` is DeepSpeed's bf16).
    Unlike the Trainer's, there are no DeepSpeed inference options: Fabric has no ``predict``.

    Args:
        accelerator: The accelerator (Fabric sets it).
        zero_optimization: Turn ZeRO on.
        stage: ZeRO stage: 0, 1, 2 or 3.
        offload_optimizer: Offload optimizer state and step to the host (``offload_optimizer_device``).
        offload_parameters: With stage 3, offload parameters to the host (``offload_params_device``).
        config: A DeepSpeed config dict, or the path of a JSON config; ``PL_DEEPSPEED_CONFIG_PATH`` by default. When
            given it decides every ZeRO setting.
        process_group_backend: ``"hccl"`` by default.

    The remaining arguments are Lightning's, with the same meaning.

    Raises:
        ConfigurationError: For an unknown stage or offload device, an unreadable config, a config that contradicts
            an argument, an optimizer type DeepSpeed cannot build, NVMe offload (no DeepSpeed builds its op for HPUs),
            a precision plugin other than Fabric's ``DeepSpeedPrecision``, or (at launch) a non-HPU accelerator.

    Example:
        >>> from lightning.fabric import Fabric
        >>> from lightning_accel.deepspeed_hpu.fabric import HPUDeepSpeedStrategy
        >>> fabric = Fabric(accelerator="hpu", devices=2, strategy="deepspeed_stage_3", precision="bf16-mixed")
        >>> isinstance(fabric.strategy, HPUDeepSpeedStrategy)  # doctest: +SKIP
        True
    """

    strategy_name = "hpu_deepspeed"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        zero_optimization: bool = True,
        stage: int = 2,
        remote_device: str | None = None,
        offload_optimizer: bool = False,
        offload_parameters: bool = False,
        offload_params_device: str = "cpu",
        nvme_path: str = "/local_nvme",
        params_buffer_count: int = 5,
        params_buffer_size: int = 100_000_000,
        max_in_cpu: int = 1_000_000_000,
        offload_optimizer_device: str = "cpu",
        optimizer_buffer_count: int = 4,
        block_size: int = 1048576,
        queue_depth: int = 8,
        single_submit: bool = False,
        overlap_events: bool = True,
        thread_count: int = 1,
        pin_memory: bool = False,
        sub_group_size: int = 1_000_000_000_000,
        contiguous_gradients: bool = True,
        overlap_comm: bool = True,
        allgather_partitions: bool = True,
        reduce_scatter: bool = True,
        allgather_bucket_size: int = 200_000_000,
        reduce_bucket_size: int = 200_000_000,
        zero_allow_untested_optimizer: bool = True,
        logging_batch_size_per_gpu: int | None = None,
        config: PathType | dict[str, Any] | None = None,
        logging_level: int = logging.WARN,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        loss_scale: float = 0,
        initial_scale_power: int = 16,
        loss_scale_window: int = 1000,
        hysteresis: int = 2,
        min_loss_scale: int = 1,
        partition_activations: bool = False,
        cpu_checkpointing: bool = False,
        contiguous_memory_optimization: bool = False,
        synchronize_checkpoint_boundary: bool = False,
        load_full_weights: bool = False,
        precision: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        exclude_frozen_parameters: bool = False,
    ) -> None:
        # DeepSpeed picks its accelerator when it is first imported, which Lightning's __init__ does.
        prepare_deepspeed_import()
        explicit = ds_config.check_arguments(
            {
                "zero_optimization": zero_optimization,
                "stage": stage,
                "offload_optimizer": offload_optimizer,
                "offload_parameters": offload_parameters,
                "offload_params_device": offload_params_device,
                "offload_optimizer_device": offload_optimizer_device,
                "nvme_path": nvme_path,
                "cpu_checkpointing": cpu_checkpointing,
                "partition_activations": partition_activations,
                "contiguous_memory_optimization": contiguous_memory_optimization,
                "synchronize_checkpoint_boundary": synchronize_checkpoint_boundary,
                # The Trainer's default "auto" is Fabric's None: DeepSpeed's micro batch of 1.
                "logging_batch_size_per_gpu": "auto"
                if logging_batch_size_per_gpu is None
                else logging_batch_size_per_gpu,
            }
        )
        check_process_group_backend(process_group_backend, "HPUDeepSpeedStrategy")
        self._user_config = False
        super().__init__(
            accelerator=accelerator,
            zero_optimization=zero_optimization,
            stage=stage,
            remote_device=remote_device,
            offload_optimizer=offload_optimizer,
            offload_parameters=offload_parameters,
            offload_params_device=offload_params_device,
            nvme_path=nvme_path,
            params_buffer_count=params_buffer_count,
            params_buffer_size=params_buffer_size,
            max_in_cpu=max_in_cpu,
            offload_optimizer_device=offload_optimizer_device,
            optimizer_buffer_count=optimizer_buffer_count,
            block_size=block_size,
            queue_depth=queue_depth,
            single_submit=single_submit,
            overlap_events=overlap_events,
            thread_count=thread_count,
            pin_memory=pin_memory,
            sub_group_size=sub_group_size,
            contiguous_gradients=contiguous_gradients,
            overlap_comm=overlap_comm,
            allgather_partitions=allgather_partitions,
            reduce_scatter=reduce_scatter,
            allgather_bucket_size=allgather_bucket_size,
            reduce_bucket_size=reduce_bucket_size,
            zero_allow_untested_optimizer=zero_allow_untested_optimizer,
            logging_batch_size_per_gpu=logging_batch_size_per_gpu,
            config=config,
            logging_level=logging_level,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            loss_scale=loss_scale,
            initial_scale_power=initial_scale_power,
            loss_scale_window=loss_scale_window,
            hysteresis=hysteresis,
            min_loss_scale=min_loss_scale,
            partition_activations=partition_activations,
            cpu_checkpointing=cpu_checkpointing,
            contiguous_memory_optimization=contiguous_memory_optimization,
            synchronize_checkpoint_boundary=synchronize_checkpoint_boundary,
            load_full_weights=load_full_weights,
            precision=precision,
            process_group_backend=process_group_backend or sdk.distributed_backend(),
            timeout=timeout,
            exclude_frozen_parameters=exclude_frozen_parameters,
        )
        assert self.config is not None
        ds_config.check_strategy_config(self.config, explicit, self._user_config)

    # --- devices and processes -------------------------------------------------------------------------------------

    @override
    def setup_environment(self) -> None:
        """Check the accelerator is an HPU, then set up as Fabric's DDP does (Lightning's DeepSpeed takes only CUDA).

        Raises:
            ConfigurationError: When the accelerator is not the HPU accelerator.
        """
        self._start_rank_watch()
        self._check_hpu_accelerator()
        DDPStrategy.setup_environment(self)

    @override
    def _setup_distributed(self) -> None:
        # HPUs have no device index per process (the runtime gives each process its module), so Lightning's check that
        # device indices equal local ranks does not apply; HCCL is joined through DeepSpeed.
        reset_seed()
        self._set_world_ranks()
        self._hccl.initialize(self.world_size, self.global_rank, self.local_rank)
        check_deepspeed_accelerator()
        # The process group is ended at exit only when this strategy created it (see HCCLStrategyMixin.teardown).
        self.__dict__["_joined_group"] = not torch.distributed.is_initialized()
        self._init_deepspeed_distributed()
        if not self._config_initialized:
            self._format_config()
            self._config_initialized = True

    # --- precision -------------------------------------------------------------------------------------------------

    @property
    @override
    def precision(self) -> Precision:
        """The precision plugin: Fabric's ``DeepSpeedPrecision`` (32-true until Fabric sets its own)."""
        if self._precision is None:
            self._precision = DeepSpeedPrecision("32-true")
        return self._precision

    @precision.setter
    def precision(self, precision: Precision | None) -> None:
        """Take Fabric's ``DeepSpeedPrecision`` (what ``Fabric(precision=...)`` builds for this strategy).

        Raises:
            ConfigurationError: For any other precision plugin: DeepSpeed's engine runs backward and casts itself.
        """
        if precision is not None and not isinstance(precision, DeepSpeedPrecision):
            raise ConfigurationError(
                f"HPUDeepSpeedStrategy got the precision plugin {type(precision).__name__}, but DeepSpeed's engine "
                "runs the backward pass and the casts itself. Accepted: Fabric(precision='bf16-mixed' | 'bf16-true' | "
                "'32-true' | '16-mixed') or lightning.fabric.plugins.DeepSpeedPrecision(...); remove the other "
                "precision plugin from Fabric(plugins=...)."
            )
        self._precision = precision

    # --- config ----------------------------------------------------------------------------------------------------

    @override
    def _load_config(self, config: PathType | dict[str, Any] | None) -> dict[str, Any] | None:
        loaded = ds_config.load_config(config)
        self._user_config = loaded is not None
        return loaded

    @override
    def _format_config(self) -> None:
        assert self.config is not None
        from deepspeed.accelerator import get_accelerator

        ds_config.check_precision(self.config, self.precision.precision, bool(get_accelerator().is_fp16_supported()))
        super()._format_config()
        ds_config.check_batch_size(self.config, self.world_size)

    # --- training --------------------------------------------------------------------------------------------------

    @override
    def _initialize_engine(
        self, model: Module, optimizer: Optimizer | None = None, scheduler: Any | None = None
    ) -> tuple[deepspeed.DeepSpeedEngine, Optimizer, Any]:
        import deepspeed

        # zero.Init() models place their own partitions; any other goes to the HPU before DeepSpeed sees it, so that
        # the parameters its optimizer gets are the ones it trains (Fabric has moved it unless move_to_device=False).
        if not any(hasattr(p, "ds_id") for p in model.parameters()):
            model = model.to(self.root_device)
        engine, deepspeed_optimizer, _, deepspeed_scheduler = deepspeed.initialize(
            # HPU devices have no index: DeepSpeed's device is the one of this local rank among the node's HPUs.
            args=argparse.Namespace(device_rank=self.local_rank),
            config=self.config,
            model=model,
            model_parameters=[p for p in model.parameters() if p.requires_grad],
            optimizer=optimizer,
            lr_scheduler=scheduler,
            dist_init_required=False,
        )
        return engine, deepspeed_optimizer, deepspeed_scheduler

    # --- registration ----------------------------------------------------------------------------------------------

    @classmethod
    def from_lightning_strategy(cls, strategy: DeepSpeedStrategy) -> HPUDeepSpeedStrategy:
        """This strategy with the arguments of Lightning's Fabric ``DeepSpeedStrategy(...)`` instance ``strategy``.

        The core calls it for ``Fabric(accelerator="hpu", strategy=DeepSpeedStrategy(...))``. Lightning's instance
        keeps its ZeRO, offload and activation checkpointing arguments as the DeepSpeed config it built, which is
        handed over as ``config``.

        Raises:
            ConfigurationError: For a ``process_group_backend`` other than ``"hccl"``, or a config the HPU strategy
                refuses.
        """
        check_process_group_backend(strategy._process_group_backend, "DeepSpeedStrategy")
        return cls(
            accelerator=strategy._accelerator,
            config=copy.deepcopy(strategy.config),
            remote_device=strategy.remote_device,
            load_full_weights=strategy.load_full_weights,
            exclude_frozen_parameters=strategy.exclude_frozen_parameters,
            parallel_devices=strategy.parallel_devices,
            cluster_environment=strategy.cluster_environment,
            precision=strategy._precision,
            timeout=strategy._timeout,
            loss_scale=strategy.loss_scale,
            initial_scale_power=strategy.initial_scale_power,
            loss_scale_window=strategy.loss_scale_window,
            hysteresis=strategy.hysteresis,
            min_loss_scale=strategy.min_loss_scale,
        )

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register the ``hpu_deepspeed*`` names (the core does this from the plugin spec), never Lightning's names."""
        from .plugin import PLUGIN

        for spec in PLUGIN.strategies:
            strategy_registry.register(
                spec.name, cls, description=spec.description, override=True, **dict(spec.init_params)
            )
