"""``HPUDeepSpeedStrategy``: Lightning's DeepSpeed strategy on Intel Gaudi, and on its emulator."""

from __future__ import annotations

import argparse
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.plugins.precision import DeepSpeedPrecision, Precision
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy
from lightning.pytorch.strategies.deepspeed import remove_module_hooks
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from lightning.pytorch.utilities.types import LRSchedulerConfig
from typing_extensions import override

from lightning_accel.core.checkpoint_swap import StagedCheckpoints
from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import sdk
from lightning_accel.habana.distributed import HCCLStrategyMixin, MarkStepAfterUpdates, MarkStepAroundEvaluation

from . import config as ds_config
from ._runtime import check_deepspeed_accelerator, check_process_group_backend, prepare_deepspeed_import
from .inference import InferenceSettings, TensorParallelGroups, split_inference_config
from .optimizers import check_client_optimizer
from .precision import HPUDeepSpeedPrecisionPlugin

if TYPE_CHECKING:
    import deepspeed
    from lightning.fabric.plugins import ClusterEnvironment
    from lightning.pytorch.accelerators import Accelerator
    from torch.nn import Module
    from torch.optim import Optimizer

    from lightning_accel.core.compat import PathType

__all__ = ["HPUDeepSpeedStrategy"]


class HPUDeepSpeedStrategy(
    StagedCheckpoints, HCCLStrategyMixin, MarkStepAfterUpdates, MarkStepAroundEvaluation, DeepSpeedStrategy
):
    """DeepSpeed (ZeRO 1/2/3, offload, bf16, activation checkpointing, inference) on HPUs.

    A subclass of Lightning's :class:`~lightning.pytorch.strategies.DeepSpeedStrategy`, so Lightning's own DeepSpeed
    handling applies (precision choice, model summary, checks in callbacks); it takes the same arguments. On Gaudi it
    runs DeepSpeed's HPU accelerator (``DS_ACCELERATOR=hpu``) over HCCL, on Gaudi and on the emulator
    (``LIGHTNING_ACCEL_EMULATE=hpu``) alike. Checkpoint directories are written aside and swapped in once every rank
    has written, so a kill during a save leaves a whole checkpoint
    (:class:`~lightning_accel.core.checkpoint_swap.StagedCheckpoints`).

    Differences from Lightning's strategy: a config and a ZeRO argument that contradict each other are an error (not a
    silently ignored argument); the optimizer and scheduler returned by ``configure_optimizers`` win over the
    config's (return ``None`` to use the config's optimizer); keyword arguments are DeepSpeed inference options used
    by ``trainer.predict``, as are the same keys in ``config``.

    Args:
        accelerator: The accelerator (the Trainer sets it).
        zero_optimization: Turn ZeRO on.
        stage: ZeRO stage: 0, 1, 2 or 3.
        offload_optimizer: Offload optimizer state and step to the host (``offload_optimizer_device``).
        offload_parameters: With stage 3, offload parameters to the host (``offload_params_device``).
        cpu_checkpointing: With activation checkpointing, keep checkpointed activations on the host.
        config: A DeepSpeed config dict, or the path of a JSON config; ``PL_DEEPSPEED_CONFIG_PATH`` by default. When
            given it decides every ZeRO setting.
        parallel_devices: The HPUs of this node, e.g. ``[torch.device("hpu")] * 8``, or their number.
        logging_batch_size_per_gpu: ``train_micro_batch_size_per_gpu`` for DeepSpeed's throughput logging.
        process_group_backend: ``"hccl"`` by default.
        **kwargs: DeepSpeed inference options for ``trainer.predict``: ``tensor_parallel``, ``dtype``,
            ``replace_with_kernel_inject``, ``injection_policy``, ``replace_method``, ``enable_cuda_graph`` and the
            other keys of :data:`~lightning_accel.deepspeed_hpu.inference.INFERENCE_KEYS`.

    The remaining arguments are Lightning's, with the same meaning.

    Raises:
        ConfigurationError: For an unknown stage, an unreadable config, a config that contradicts an argument, or an
            unknown keyword argument.

    Example:
        >>> import torch
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.deepspeed_hpu import HPUDeepSpeedPrecisionPlugin, HPUDeepSpeedStrategy
        >>> from lightning_accel.habana import HPUAccelerator
        >>> trainer = Trainer(
        ...     accelerator=HPUAccelerator(),
        ...     strategy=HPUDeepSpeedStrategy(stage=3, parallel_devices=[torch.device("hpu")] * 2),
        ...     plugins=[HPUDeepSpeedPrecisionPlugin("bf16-mixed")],
        ... )  # doctest: +SKIP
    """

    strategy_name = "hpu_deepspeed"
    # Lightning's DDP family keeps the names each class registered here; this class has its own list so that nothing
    # it does leaks into DDPStrategy's.
    _registered_strategies: ClassVar[list[str]] = []

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
        logging_batch_size_per_gpu: str | int = "auto",
        config: PathType | dict[str, Any] | None = None,
        logging_level: int = logging.WARN,
        parallel_devices: list[torch.device] | int | None = None,
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
        precision_plugin: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        exclude_frozen_parameters: bool = False,
        **kwargs: Any,
    ) -> None:
        # DeepSpeed picks its accelerator when it is first imported, which Lightning's __init__ does.
        prepare_deepspeed_import()
        given = {
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
            "logging_batch_size_per_gpu": logging_batch_size_per_gpu,
        }
        explicit = ds_config.check_arguments(given)
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
            parallel_devices=_hpu_devices(parallel_devices),
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
            precision_plugin=precision_plugin,
            process_group_backend=process_group_backend or sdk.distributed_backend(),
            timeout=timeout,
            exclude_frozen_parameters=exclude_frozen_parameters,
        )
        assert self.config is not None
        self.config, inference_config = split_inference_config(self.config)
        ds_config.check_strategy_config(self.config, explicit, self._user_config)
        self.inference = InferenceSettings.merge(inference_config, kwargs)
        self.inference.tp_size  # noqa: B018 - validates tensor_parallel now rather than at predict

    # --- devices and processes -------------------------------------------------------------------------------------

    @override
    def setup_environment(self) -> None:
        """Check the accelerator is an HPU, then set up as DDP does (Lightning's DeepSpeed strategy accepts only CUDA).

        Raises:
            ConfigurationError: When the accelerator is not the HPU accelerator.
        """
        self._check_hpu_accelerator()
        DDPStrategy.setup_environment(self)

    @override
    def setup_distributed(self) -> None:
        """Join the ``"hccl"`` process group through DeepSpeed.

        HPUs have no device index per process (the runtime gives each process its module), so Lightning's check that
        device indices equal local ranks does not apply.
        """
        reset_seed()
        self.set_world_ranks()
        self._hccl.initialize(self.world_size, self.global_rank, self.local_rank)
        check_deepspeed_accelerator()
        self._init_deepspeed_distributed()

    @override
    def teardown(self) -> None:
        """Tear down as Lightning does, but leave the module where DeepSpeed put its parameters.

        Lightning moves the module to the host after ``fit``. DeepSpeed's engine outlives ``fit`` (``save_checkpoint``
        and ``test`` use it) and owns the parameters: ZeRO-3 keeps only partitions, with its own attributes on each
        parameter object, and the engine keeps references to the objects. Moving them would leave it stale (on the
        emulator, where a move to the host makes new parameter objects, it fails outright).
        """
        module = self.lightning_module
        if module is None:
            super().teardown()
            return
        # Lightning's teardown calls `lightning_module.cpu()`: make it a no-op for this call only.
        module.cpu = lambda: module  # type: ignore[method-assign]
        try:
            super().teardown()
        finally:
            del module.cpu

    # --- precision -------------------------------------------------------------------------------------------------

    @property
    @override
    def precision_plugin(self) -> Precision:
        """The precision plugin: an :class:`HPUDeepSpeedPrecisionPlugin` (32-true unless set)."""
        if self._precision_plugin is None:
            self._precision_plugin = HPUDeepSpeedPrecisionPlugin()
        return self._precision_plugin

    @precision_plugin.setter
    def precision_plugin(self, precision_plugin: Precision | None) -> None:
        """Take an :class:`HPUDeepSpeedPrecisionPlugin`, or Lightning's ``DeepSpeedPrecision`` (translated).

        Raises:
            ConfigurationError: For any other precision plugin.
        """
        if precision_plugin is None:
            self._precision_plugin = None
            return
        if not isinstance(precision_plugin, DeepSpeedPrecision):
            raise ConfigurationError(
                f"HPUDeepSpeedStrategy got the precision plugin {type(precision_plugin).__name__}. Accepted: "
                "HPUDeepSpeedPrecisionPlugin, Lightning's DeepSpeedPrecision, or Trainer(precision='bf16-mixed' | "
                "'bf16-true' | '32-true' | '16-mixed')."
            )
        self._precision_plugin = HPUDeepSpeedPrecisionPlugin.from_lightning(precision_plugin)

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

        ds_config.check_precision(
            self.config, self.precision_plugin.precision, bool(get_accelerator().is_fp16_supported())
        )
        super()._format_config()
        if self.lightning_module is not None:
            ds_config.check_batch_size(self.config, self.world_size)

    @override
    def _auto_select_batch_size(self) -> int:
        # The micro batch size only feeds DeepSpeed's throughput logging. Lightning reads the training loader for it,
        # which outside fit may need setup("fit") the datamodule never had (validate/test/predict would crash).
        module = self.lightning_module
        if module is None or module.trainer.state.fn != TrainerFn.FITTING:
            return 1
        return super()._auto_select_batch_size()

    # --- training --------------------------------------------------------------------------------------------------

    def _module_optimizer(self) -> tuple[Optimizer | None, LRSchedulerConfig | None]:
        """The optimizer and scheduler of ``configure_optimizers``, or ``(None, None)`` when it returns none."""
        assert self.lightning_module is not None
        try:
            optimizer, scheduler = self._init_optimizers()
        except MisconfigurationException as exc:
            if "single optimizer" not in str(exc):
                raise
            raise ConfigurationError(
                "configure_optimizers returned several optimizers or schedulers, but DeepSpeed runs one optimizer with "
                "at most one scheduler. Fix: return one optimizer (use parameter groups for different settings) and at "
                "most one scheduler."
            ) from exc
        own = {id(p) for p in self.lightning_module.parameters()}
        # Lightning stands in a placeholder optimizer over none of the model's parameters when the hook returns None.
        if not any(id(p) in own for group in optimizer.param_groups for p in group["params"]):
            return None, None
        return optimizer, scheduler

    @override
    def _initialize_deepspeed_train(self, model: Module) -> None:
        assert isinstance(self.config, dict)
        optimizer, scheduler_config = self._module_optimizer()
        run_config = dict(self.config)
        if optimizer is None:
            if "optimizer" not in run_config:
                raise ConfigurationError(
                    "There is no optimizer: configure_optimizers returned None and the DeepSpeed config has no "
                    "'optimizer' section. Fix: return an optimizer from configure_optimizers, or add "
                    '"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}} to the config.'
                )
        else:
            if "optimizer" in run_config:
                rank_zero_info("HPUDeepSpeedStrategy: the optimizer of configure_optimizers wins over the config's.")
                run_config.pop("optimizer")
            if scheduler_config is not None and "scheduler" in run_config:
                rank_zero_info("HPUDeepSpeedStrategy: the scheduler of configure_optimizers wins over the config's.")
                run_config.pop("scheduler")
            check_client_optimizer(optimizer, run_config)
        scheduler = scheduler_config.scheduler if scheduler_config is not None else None
        engine, deepspeed_optimizer = self._initialize_engine(model, optimizer, scheduler, run_config)
        self._set_deepspeed_activation_checkpointing()
        self.optimizers = [deepspeed_optimizer]
        # Lightning steps the scheduler, so DeepSpeed must not step it too.
        deepspeed_scheduler = engine.lr_scheduler
        if deepspeed_scheduler is not None:
            engine.lr_scheduler = None
            if scheduler_config is None:
                scheduler_config = LRSchedulerConfig(deepspeed_scheduler, interval="step")
            else:
                scheduler_config.scheduler = deepspeed_scheduler
            self.lr_scheduler_configs = [scheduler_config]
        self.model = engine

    @override
    def _set_deepspeed_activation_checkpointing(self) -> None:
        import deepspeed

        assert isinstance(self.config, dict)
        checkpoint_config = self.config.get("activation_checkpointing")
        if not checkpoint_config:
            return
        in_cpu = bool(checkpoint_config.get("cpu_checkpointing"))
        deepspeed.checkpointing.configure(
            mpu_=None,
            partition_activations=checkpoint_config.get("partition_activations"),
            contiguous_checkpointing=checkpoint_config.get("contiguous_memory_optimization"),
            checkpoint_in_cpu=in_cpu,
            profile=checkpoint_config.get("profile"),
        )

    @override
    def _setup_model_and_optimizer(
        self, model: Module, optimizer: Optimizer | None, lr_scheduler: Any | None = None
    ) -> tuple[deepspeed.DeepSpeedEngine, Optimizer]:
        assert self.config is not None
        return self._initialize_engine(model, optimizer, lr_scheduler, self.config)

    def _deepspeed_device_rank(self) -> int:
        # HPU devices have no index: DeepSpeed's device (its accelerator's set_device) is the one of this local rank
        # among the HPUs the process sees, all of the node's here.
        return self.local_rank

    def _on_device(self, model: Module) -> Module:
        """The model on the HPU before DeepSpeed sees it (zero.Init() models excepted: they place their partitions).

        The parameters handed to DeepSpeed's optimizer are then the ones it trains, and DeepSpeed's own move of the
        module (after it has put finalizers on the parameters) has nothing left to do.
        """
        if any(hasattr(p, "ds_id") for p in model.parameters()):
            return model
        return model.to(self.root_device)

    def _initialize_engine(
        self, model: Module, optimizer: Optimizer | None, lr_scheduler: Any | None, config: dict[str, Any]
    ) -> tuple[deepspeed.DeepSpeedEngine, Optimizer]:
        import deepspeed

        model = self._on_device(model)
        engine, deepspeed_optimizer, _, _ = deepspeed.initialize(
            args=argparse.Namespace(device_rank=self._deepspeed_device_rank()),
            config=config,
            model=model,
            model_parameters=[p for p in model.parameters() if p.requires_grad],
            optimizer=optimizer,
            lr_scheduler=lr_scheduler,
            dist_init_required=False,
        )
        return engine, deepspeed_optimizer

    # --- inference -------------------------------------------------------------------------------------------------

    @override
    def _initialize_deepspeed_inference(self, model: Module) -> None:
        precision = self.precision_plugin
        assert isinstance(precision, HPUDeepSpeedPrecisionPlugin)
        if not self.inference.active:
            precision.cast_inputs_to(None)
            self._initialize_training_engine_for_inference(model)
            return
        import deepspeed

        self.inference.validate(
            self.world_size, has_inference_kernels=_has_inference_kernels(), lazy=bool(sdk.core_module().is_lazy())
        )
        # DeepSpeed's own group (ranks 0..tp_size-1) is right when the group spans the world; ours cover the rest.
        size = self.inference.tp_size
        groups = TensorParallelGroups(size) if 1 < size < self.world_size else None
        kwargs = self.inference.init_kwargs(precision.dtype, groups)
        remove_module_hooks(model)
        engine = deepspeed.init_inference(_InjectionRoot(model), **kwargs)
        precision.cast_inputs_to(kwargs["dtype"] if isinstance(kwargs["dtype"], torch.dtype) else None)
        self.model = engine

    def _initialize_training_engine_for_inference(self, model: Module) -> None:
        import deepspeed

        assert isinstance(self.config, dict)
        inference_config: dict[str, Any] = {"train_micro_batch_size_per_gpu": 1}
        for key in ("fp16", "bf16"):
            if key in self.config:
                inference_config[key] = self.config[key]
        if self.zero_stage_3:
            inference_config["zero_allow_untested_optimizer"] = self.config.get("zero_allow_untested_optimizer", True)
            inference_config["zero_optimization"] = self.config["zero_optimization"]
        remove_module_hooks(model)
        model = self._on_device(model)
        engine, _, _, _ = deepspeed.initialize(
            args=argparse.Namespace(device_rank=self._deepspeed_device_rank()),
            config=inference_config,
            model=model,
            optimizer=None,
            lr_scheduler=None,
            model_parameters=[],
            dist_init_required=False,
        )
        self.model = engine

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """One shard of data per tensor-parallel group while predicting with TP: its ranks must see the same batches."""
        size = self.inference.tp_size
        module = self.lightning_module
        trainer = module._trainer if module is not None else None
        predicting = trainer is not None and trainer.state.fn == TrainerFn.PREDICTING
        if size > 1 and predicting:
            return {"num_replicas": self.world_size // size, "rank": self.global_rank // size}
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    # --- registration ----------------------------------------------------------------------------------------------

    @classmethod
    def from_lightning_strategy(cls, strategy: DeepSpeedStrategy) -> HPUDeepSpeedStrategy:
        """This strategy with the arguments of Lightning's ``DeepSpeedStrategy(...)`` instance ``strategy``.

        The core calls it for ``Trainer(accelerator="hpu", strategy=DeepSpeedStrategy(...))``, so a GPU script's
        instance runs on HPUs as the names ``"deepspeed_stage_2"`` ... do. Lightning's instance keeps its ZeRO, offload
        and activation checkpointing arguments as the DeepSpeed config it built, which is handed over as ``config``.

        Raises:
            ConfigurationError: For a ``process_group_backend`` other than ``"hccl"``, or a config the HPU strategy
                refuses.
        """
        import copy

        check_process_group_backend(strategy._process_group_backend, "DeepSpeedStrategy")
        return cls(
            accelerator=strategy._accelerator,
            config=copy.deepcopy(strategy.config),
            remote_device=strategy.remote_device,
            load_full_weights=strategy.load_full_weights,
            exclude_frozen_parameters=strategy.exclude_frozen_parameters,
            parallel_devices=strategy.parallel_devices,
            cluster_environment=strategy.cluster_environment,
            precision_plugin=strategy._precision_plugin,
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
            if spec.name not in cls._registered_strategies:
                cls._registered_strategies.append(spec.name)


class _InjectionRoot(torch.nn.Module):
    """Holds the LightningModule as a child so that an ``injection_policy`` may name the LightningModule's own class.

    DeepSpeed looks for the policy's classes among the children of the module it is given, never the module itself.
    """

    def __init__(self, module: Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


def _hpu_devices(parallel_devices: list[torch.device] | int | None) -> list[torch.device] | None:
    """Accept a number of HPUs (as the seed's ``parallel_devices=8``) as well as a list."""
    if isinstance(parallel_devices, bool):
        raise ConfigurationError(
            f"parallel_devices={parallel_devices!r} is not accepted. Accepted: a list such as "
            "[torch.device('hpu')] * 8, or a number of HPUs."
        )
    if isinstance(parallel_devices, int):
        if parallel_devices < 1:
            raise ConfigurationError(
                f"parallel_devices={parallel_devices!r} is not accepted. Accepted: a positive number of HPUs, or a "
                "list such as [torch.device('hpu')] * 8."
            )
        return [torch.device(sdk.DEVICE_TYPE)] * parallel_devices
    return parallel_devices


def _has_inference_kernels() -> bool:
    """Whether this DeepSpeed ships its prebuilt ``transformer_inference`` op (what kernel injection runs on HPUs)."""
    try:
        from deepspeed.git_version_info import installed_ops
    except ImportError:
        return False
    return bool(installed_ops.get("transformer_inference", False))
