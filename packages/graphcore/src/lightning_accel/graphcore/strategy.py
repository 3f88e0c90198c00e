"""``IPUStrategy`` (alias ``IPUPlugin``): compile the LightningModule's steps with poptorch and run them on IPUs."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import GradientAccumulationScheduler
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import ParallelStrategy
from lightning.pytorch.trainer.states import RunningStage, TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.model_helpers import is_overridden
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from . import sdk
from ._checkpoint_state import upgrade_older_emulator_state
from ._dataloaders import to_poptorch_loader
from ._device_options import device_optimizer, resolve_options, sync_hyperparameters
from ._host_optimizer import install_parameterless_zero_grad, remove_parameterless_zero_grad
from ._optimizer_checks import check_every_weight_is_optimized, hyperparameters, refused_change_message
from ._replication import AutoDevices, check_reservable, replication_from_options, trim_automatic_devices
from ._step_module import StepModule, metric_states_kept_on_host
from .accelerator import IPUAccelerator
from .precision import IPUPrecision, normalize_precision

__all__ = ["IPUPlugin", "IPUStrategy"]

_ENGINE_OPTIONS = "POPLAR_ENGINE_OPTIONS"
_HINT = (
    "With Lightning, poptorch's options come from: replicationFactor <- Trainer(devices=N) (N replicas; a model split "
    "over k IPUs with BeginBlock/Block needs k x N IPUs), deviceIterations <- IPUStrategy(device_iterations=...) or "
    "the options you pass, Training.gradientAccumulation <- Trainer(accumulate_grad_batches=...)."
)
_STAGE_NAMES = {
    RunningStage.TRAINING: "training",
    RunningStage.SANITY_CHECKING: "validation",
    RunningStage.VALIDATING: "validation",
    RunningStage.TESTING: "test",
    RunningStage.PREDICTING: "predict",
}


def _precision_for_ipu(plugin: Precision) -> IPUPrecision:
    """The IPU precision matching a generic plugin that Lightning's connector built from ``precision=``."""
    if isinstance(plugin, IPUPrecision):
        return plugin
    name = getattr(plugin, "precision", None)
    if type(plugin).__name__ in ("Precision", "MixedPrecision", "HalfPrecision", "DoublePrecision"):
        return IPUPrecision(normalize_precision(name))
    raise ConfigurationError(
        f"The precision plugin {type(plugin).__name__} cannot run on IPUs. Pass precision='32-true', '16-mixed' or "
        "'16-true' (or plugins=IPUPrecision(...))."
    )


def _rows(batch: Any) -> int | None:
    """The batch dimension of the first tensor in ``batch``."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        rows = _rows(item)
        if rows is not None:
            return rows
    return None


class IPUStrategy(ParallelStrategy):
    """Train, validate, test and predict on Graphcore IPUs with poptorch.

    Each step of the LightningModule is compiled by poptorch; ``Trainer(devices=N)`` gives ``N`` data-parallel
    replicas. One Lightning batch is one host call: it holds ``batch_size x device_iterations x N x
    accumulate_grad_batches`` samples (dataloaders are converted for you) and the device performs
    ``device_iterations`` weight updates per call, each over ``accumulate_grad_batches x N`` micro-batches.

    Beyond the archived lightning-graphcore, ``self.log`` in the steps logs the values of every host call (the logged
    tensors are returned from the device), ``gradient_clip_val`` clips by norm on the device, optimizer state is
    saved in checkpoints, and ``accumulate_grad_batches`` gives the right number of weight updates.

    Args:
        accelerator: The accelerator (``IPUAccelerator``); set by the Trainer when omitted.
        device_iterations: Iterations the device runs per host call (raise it for pipelined models).
        autoreport: Write a profile report of every compiled model (PopVision's auto-report).
        autoreport_dir: Where to write the reports; setting it turns ``autoreport`` on.
        parallel_devices: Set by the Trainer from ``devices``.
        cluster_environment: Unused on IPUs (poptorch replicates within one process).
        checkpoint_io: How checkpoints are written.
        precision_plugin: An ``IPUPrecision``; the Trainer's ``precision=`` is converted otherwise.
        training_opts: ``poptorch.Options`` for training; values left at their defaults take the Trainer's.
        inference_opts: ``poptorch.Options`` for validation, test and predict.
        device: One device, as single-device selection passes it (same as ``parallel_devices=[device]``).

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.graphcore import IPUAccelerator, IPUStrategy
        >>> trainer = Trainer(  # doctest: +SKIP
        ...     accelerator=IPUAccelerator(), strategy=IPUStrategy(device_iterations=32), devices=8
        ... )
    """

    strategy_name = "ipu_strategy"

    def __init__(
        self,
        accelerator: Any = None,
        device_iterations: int = 1,
        autoreport: bool = False,
        autoreport_dir: str | os.PathLike[str] | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        checkpoint_io: Any = None,
        precision_plugin: Precision | None = None,
        training_opts: Any = None,
        inference_opts: Any = None,
        device: torch.device | None = None,
    ) -> None:
        if isinstance(device_iterations, bool) or not isinstance(device_iterations, int) or device_iterations < 1:
            raise ConfigurationError(
                f"IPUStrategy(device_iterations={device_iterations!r}) is not accepted: pass a positive int "
                "(default 1)."
            )
        if not isinstance(autoreport, bool):
            raise ConfigurationError(f"IPUStrategy(autoreport={autoreport!r}) is not accepted: pass True or False.")
        if autoreport_dir is not None and not isinstance(autoreport_dir, (str, os.PathLike)):
            raise ConfigurationError(
                f"IPUStrategy(autoreport_dir={autoreport_dir!r}) is not accepted: pass a directory path or None."
            )
        if autoreport_dir is not None:
            _check_report_directory(autoreport_dir)
        for argument, opts in (("training_opts", training_opts), ("inference_opts", inference_opts)):
            if opts is not None and not isinstance(opts, sdk.poptorch.Options):
                raise ConfigurationError(
                    f"IPUStrategy({argument}={opts!r}) is not accepted: pass a poptorch.Options (`import poptorch`, "
                    "or lightning_accel.graphcore.sdk.poptorch) or None."
                )
        if device is not None and parallel_devices is None:
            parallel_devices = [device]
        self._options_replicas = replication_from_options(training_opts, inference_opts)
        self._automatic_devices = False
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
        )
        self.device_iterations = device_iterations
        self.autoreport = autoreport or autoreport_dir is not None
        self.autoreport_dir = None if autoreport_dir is None else Path(autoreport_dir)
        self._user_training_opts = training_opts
        self._user_inference_opts = inference_opts
        self._resolved_opts: dict[bool, Any] = {}
        self.poptorch_models: dict[Any, Any] = {}
        self._compiled_rows: dict[Any, int | None] = {}
        self._compiled_structure: dict[Any, Any] = {}
        self._log_records: dict[int, list[Any]] = {}
        self._ipu_optimizer_state: dict[str, Any] | None = None
        self._step_module: StepModule | None = None
        self._device_optimizer: Any = None
        self._optimizer_structure: Any = None
        self._accepted_hyperparameters: list[dict[str, Any]] = []
        self._saved_engine_options: str | None = None
        self._accumulation = 1
        self._scheduled_accumulation = False
        self._trainer: Trainer | None = None
        # The Trainer of any run (fit, validate, test, predict) from setup to teardown: its stage picks the replicas.
        self._running_trainer: Trainer | None = None
        self._told: set[bool] = set()  # the stages whose replicas override devices, said once

    # -- registry ----------------------------------------------------------------------------------------------

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register as ``"ipu_strategy"``."""
        strategy_registry.register(cls.strategy_name, cls, description="Graphcore IPUs through poptorch", override=True)

    # -- devices -----------------------------------------------------------------------------------------------

    @property
    def _poptorch(self) -> ModuleType:
        return sdk.poptorch_module()

    @property
    @override
    def root_device(self) -> torch.device:
        """The host device that holds the model and feeds poptorch (the backing device under emulation)."""
        return sdk.host_device()

    @property
    def replication_factor(self) -> int:
        """Number of data-parallel replicas of the running stage (of training while none runs).

        Each stage runs on its own options' replication factor, else on ``Trainer(devices=...)`` (see
        :meth:`stage_replication_factor`). Known before the strategy is attached to a Trainer.
        """
        trainer = self._running_trainer
        stage = trainer.state.stage if trainer is not None else None
        return self.stage_replication_factor(training=stage in (None, RunningStage.TRAINING))

    def stage_replication_factor(self, training: bool) -> int:
        """The replicas of the training model (``training=True``) or of the inference models.

        The factor the stage's options set (``training_opts`` or ``inference_opts``), else ``Trainer(devices=N)``;
        without ``devices``, the largest factor the options set, else every IPU Lightning found.

        Example:
            >>> import poptorch
            >>> strategy = IPUStrategy(training_opts=poptorch.Options().replicationFactor(4))
            >>> strategy.stage_replication_factor(training=True), strategy.stage_replication_factor(training=False)
            (4, 4)
        """
        own = self._options_replicas[training]
        if own is not None:
            return own
        if self.parallel_devices:
            return len(self.parallel_devices)
        return max((factor for factor in self._options_replicas.values() if factor is not None), default=1)

    @property
    @override
    def parallel_devices(self) -> list[torch.device] | None:
        return self._parallel_devices

    @parallel_devices.setter
    def parallel_devices(self, parallel_devices: list[torch.device] | None) -> None:
        # Lightning chose these devices itself (devices not given): the options' replication factor decides.
        self._automatic_devices = isinstance(parallel_devices, AutoDevices)
        explicit = [(factor, training) for training, factor in self._options_replicas.items() if factor is not None]
        if parallel_devices is not None and self._automatic_devices and explicit:
            largest, training = max(explicit)
            argument = "training_opts" if training else "inference_opts"
            parallel_devices = AutoDevices(trim_automatic_devices(parallel_devices, largest, argument))
        self._parallel_devices = parallel_devices

    @property
    def distributed_sampler_kwargs(self) -> None:  # type: ignore[override]
        """None: poptorch splits each host batch over the replicas itself."""
        return None

    @property
    def is_distributed(self) -> bool:
        """False: one process drives every replica, so Lightning adds no distributed sampler."""
        return False

    @property
    @override
    def precision_plugin(self) -> Precision:
        plugin = self._precision_plugin if self._precision_plugin is not None else IPUPrecision()
        return plugin

    @precision_plugin.setter
    @override
    def precision_plugin(self, precision_plugin: Precision | None) -> None:
        self._precision_plugin = None if precision_plugin is None else _precision_for_ipu(precision_plugin)

    @override
    def setup_environment(self) -> None:
        self._poptorch  # noqa: B018 - raises DeviceUnavailableError (with the fix) when IPUs cannot be used
        super().setup_environment()

    @override
    def model_to_device(self) -> None:
        assert self.model is not None
        self.model.to(self.root_device)

    # -- collectives: one process drives all replicas ----------------------------------------------------------

    @override
    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        return tensor

    @override
    def barrier(self, name: str | None = None) -> None:
        return None

    @override
    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    @override
    def all_gather(self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False) -> torch.Tensor:
        return tensor

    # -- setup -------------------------------------------------------------------------------------------------

    @property
    def training_opts(self) -> Any:
        """The ``poptorch.Options`` used for training (resolved against the Trainer once set up)."""
        return self._resolved_opts.get(True, self._user_training_opts)

    @property
    def inference_opts(self) -> Any:
        """The ``poptorch.Options`` used for validation, test and predict."""
        return self._resolved_opts.get(False, self._user_inference_opts)

    @property
    @override
    def handles_gradient_accumulation(self) -> bool:
        """True: poptorch accumulates ``accumulate_grad_batches`` micro-batches inside every weight update."""
        return True

    def _check_module(self, trainer: Trainer, module: LightningModule) -> None:
        if not isinstance(self.accelerator, IPUAccelerator):
            raise ConfigurationError(
                f"IPUStrategy needs accelerator='ipu', got {type(self.accelerator).__name__}. Pass "
                "Trainer(accelerator='ipu') or accelerator=IPUAccelerator()."
            )
        for hook in ("transfer_batch_to_device", "on_after_batch_transfer"):
            if is_overridden(hook, module, LightningModule):
                raise ConfigurationError(
                    f"Overriding `{hook}` is not supported with IPUs: poptorch takes the host batch as the dataloader "
                    "gives it. Move that logic into the dataset's collate_fn or the step."
                )
        if not module.automatic_optimization:
            raise ConfigurationError(
                "Manual optimization (automatic_optimization=False) is not supported on IPUs: the optimizer step runs "
                "inside the compiled training step. Use automatic optimization."
            )
        if is_overridden("backward", module, LightningModule):
            rank_zero_warn("LightningModule.backward is not called on IPUs: poptorch computes the gradients.")
        if trainer.gradient_clip_val and trainer.gradient_clip_algorithm == "value":
            raise ConfigurationError(
                f"Trainer(gradient_clip_algorithm='value', gradient_clip_val={trainer.gradient_clip_val}) is not "
                "supported on IPUs. Use gradient_clip_algorithm='norm' (applied on the device to every weight update)."
            )

    def _compiled_accumulation(self, trainer: Trainer) -> int:
        """The accumulation compiled into the training model: the Trainer's, or a constant schedule's.

        poptorch compiles ``Training.gradientAccumulation`` into the model (and the dataloader's combined batch), so a
        schedule that changes it between epochs cannot be followed.

        Raises:
            ConfigurationError: For a ``GradientAccumulationScheduler`` whose factor changes, or one combined with
                ``Trainer(accumulate_grad_batches=...)``.
        """
        schedulers = [c for c in trainer.callbacks if isinstance(c, GradientAccumulationScheduler)]  # type: ignore[attr-defined]
        self._scheduled_accumulation = bool(schedulers)
        if not schedulers:
            return int(trainer.accumulate_grad_batches)
        scheduling = dict(sorted(schedulers[0].scheduling.items()))
        if trainer.accumulate_grad_batches != 1:
            raise ConfigurationError(
                f"Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches}) and a "
                f"GradientAccumulationScheduler({scheduling}) both set the accumulation. Remove one of them."
            )
        factors = {schedulers[0].get_accumulate_grad_batches(epoch) for epoch in [0, *scheduling]}
        if len(factors) != 1:
            raise ConfigurationError(
                f"GradientAccumulationScheduler(scheduling={scheduling}) changes accumulate_grad_batches between "
                "epochs, which IPUs cannot follow: poptorch compiles Training.gradientAccumulation into the training "
                "model and the dataloader's batch. Use one factor for the whole run (GradientAccumulationScheduler({0: "
                "N}) or Trainer(accumulate_grad_batches=N)), or run each phase as a fit resumed from a checkpoint."
            )
        return int(factors.pop())

    def _stage_replicas(self, training: bool) -> int:
        """The stage's replication factor, checked against the IPUs; a ``devices`` it overrides is said once."""
        own = self._options_replicas[training]
        if own is None:
            return self.stage_replication_factor(training)
        argument = "training_opts" if training else "inference_opts"
        check_reservable(own, sdk.available_ipus(), argument)
        devices = len(self.parallel_devices or ())
        trainer = self._running_trainer
        used = not training or (trainer is not None and trainer.state.fn == TrainerFn.FITTING)
        if devices and not self._automatic_devices and own != devices and used and training not in self._told:
            self._told.add(training)
            models = "the training model runs" if training else "the inference models (validation, test, predict) run"
            rank_zero_warn(
                f"{argument}.replicationFactor({own}) and Trainer(devices={devices}): {models} on {own} replicas, "
                "as the options say (each stage's options decide its replicas; devices is the replication of the "
                "stages whose options set none)."
            )
        return own

    def _options(self, trainer: Trainer, training: bool) -> Any:
        if training not in self._resolved_opts:
            seed = os.environ.get("PL_GLOBAL_SEED")
            self._resolved_opts[training] = resolve_options(
                self._user_training_opts if training else self._user_inference_opts,
                self._poptorch,
                argument="training_opts" if training else "inference_opts",
                training=training,
                replicas=self._stage_replicas(training),
                device_iterations=self.device_iterations,
                accumulation=self._accumulation if training else 1,
                seed=int(seed) if seed is not None and seed.lstrip("-").isdigit() else None,
                model_name="training" if training else "inference",
            )
        return self._resolved_opts[training]

    def _stage_options(self, stage: RunningStage) -> Any:
        opts = self._resolved_opts[stage == RunningStage.TRAINING].clone()
        return opts.modelName(_STAGE_NAMES[stage])

    def _configure_autoreport(self) -> None:
        if not self.autoreport:
            return
        self._saved_engine_options = os.environ.get(_ENGINE_OPTIONS)
        options: dict[str, str] = {"autoReport.all": "true"}
        if self.autoreport_dir is not None:
            self.autoreport_dir.mkdir(parents=True, exist_ok=True)
            options["autoReport.directory"] = str(self.autoreport_dir)
        os.environ[_ENGINE_OPTIONS] = json.dumps(options)

    @override
    def setup(self, trainer: Trainer) -> None:
        module = self.lightning_module
        assert module is not None
        self._check_module(trainer, module)
        if trainer.state.fn == TrainerFn.FITTING:
            # The device accumulates inside every host call, so for Lightning each call is one whole step: its
            # counters (global_step, scheduler steps, estimated_stepping_batches) then count host calls.
            self._accumulation = self._compiled_accumulation(trainer)
            self._trainer = trainer
            trainer.accumulate_grad_batches = 1
        self._running_trainer = trainer
        self._resolved_opts.clear()
        self._options(trainer, training=True)
        self._options(trainer, training=False)
        self._configure_autoreport()
        super().setup(trainer)
        poptorch = self._poptorch
        self._step_module = StepModule(module, loss_marker=poptorch.identity_loss, block=poptorch.Block)
        if trainer.state.fn == TrainerFn.FITTING:
            self._ipu_optimizer_state = None
            # The device optimizer and the training model now, as the archived IPUStrategy made them (callbacks read
            # poptorch_models[RunningStage.TRAINING] in on_train_start); the model compiles at the first training
            # call (see _prepare_training_model).
            self._build_device_optimizer()
            self._wrap_training_model()

    def _build_device_optimizer(self) -> None:
        """The device optimizer (a ``poptorch.optim`` one), built from the host optimizer as it is now."""
        module = self.lightning_module
        trainer = self._trainer
        assert module is not None and trainer is not None
        clip = trainer.gradient_clip_val
        check_every_weight_is_optimized(module, self.optimizers[0])
        self._device_optimizer = device_optimizer(
            self.optimizers[0],
            self._poptorch,
            float(clip) if clip and clip > 0 else None,
            schedulers=[config.scheduler for config in self.lr_scheduler_configs],
        )
        self._accepted_hyperparameters = hyperparameters(self._device_optimizer)
        self._optimizer_structure = self._structure(training=True)

    def _wrap_training_model(self) -> Any:
        """Wrap the step for training (at setup, and after a rebuild); it compiles at its first call.

        poptorch cannot wrap a model twice: ``destroy()`` unwraps only a compiled training model
        (``python/_poplar_executor.py:1482-1501``) and ``trainingModel`` refuses a wrapped one ("Model has already
        been wrapped in 'poptorch.trainingModel'", ``python/__init__.py:703-707``). So a callback that changes what
        trains before the first call (``BackboneFinetuning(unfreeze_backbone_at_epoch=0)``, a resumed
        ``BaseFinetuning``) does not wrap again: the uncompiled model gets the rebuilt device optimizer
        (:meth:`_prepare_training_model`).
        """
        poptorch = self._poptorch
        if self._optimizer_structure != self._structure(training=True):
            self._rebuild_device_optimizer()
        assert self._device_optimizer is not None
        sync_hyperparameters(self.optimizers[0], self._device_optimizer)
        self._accepted_hyperparameters = hyperparameters(self._device_optimizer)
        try:
            executor = poptorch.trainingModel(
                self._step_module, self._stage_options(RunningStage.TRAINING), optimizer=self._device_optimizer
            )
        except (poptorch.Error, AssertionError, ValueError) as err:
            # poptorch converts the optimizer here (_poplar_executor.py:241-242) and asserts on what it cannot use.
            raise ConfigurationError(
                f"poptorch refused the optimizer {type(self.optimizers[0]).__name__}: "
                f"{getattr(err, 'message', None) or err}. Check its hyper-parameters in configure_optimizers."
            ) from err
        self.poptorch_models[RunningStage.TRAINING] = executor
        self._compiled_structure[RunningStage.TRAINING] = self._structure(training=True)
        return executor

    def _prepare_training_model(self, executor: Any) -> None:
        """Before its first call, give the uncompiled training model the device optimizer for what trains now."""
        if self._optimizer_structure != self._structure(training=True):
            self._rebuild_device_optimizer()
        # setOptimizer before compiling replaces the optimizer the model will compile with (_poplar_executor.py).
        self._set_device_optimizer(executor)
        self._compiled_structure[RunningStage.TRAINING] = self._structure(training=True)

    def _rebuild_device_optimizer(self, state: dict[str, Any] | None = None) -> None:
        """Build the device optimizer again for new parameter groups; the moments of the weights still there stay."""
        if state is None:
            state = dict(self._device_optimizer.state_dict()) if self._device_optimizer is not None else {}
        self._build_device_optimizer()
        if state.get("ipu_state") is not None and self._device_optimizer is not None:
            # The moments of weights the new model still has are written to it (by name) when it compiles.
            self._device_optimizer.set_state_dict({"ipu_state": state["ipu_state"], "ipu_param": state["ipu_param"]})

    def _structure(self, training: bool) -> Any:
        """What a compiled model depends on: the names and shapes of the weights.

        For training also what trains, and how the optimizer groups it.
        """
        module = self.lightning_module
        assert module is not None
        weights = tuple(
            (name, tuple(tensor.shape), training and tensor.requires_grad)
            for name, tensor in (*module.named_parameters(), *module.named_buffers())
        )
        if not training:
            return weights
        groups = tuple(tuple(id(p) for p in group["params"]) for group in self.optimizers[0].param_groups)
        return weights, groups

    def _rebuild_training_model(self, reason: str) -> None:
        """Compile the training model again, as poptorch needs after ``destroy()``; the device state carries over."""
        rank_zero_warn(
            f"The IPU training model is compiled again because {reason}. poptorch compiles the model for fixed "
            "weights, trainable parameters, optimizer groups and batch shapes; on IPUs each compile takes minutes."
        )
        old = self.poptorch_models.pop(RunningStage.TRAINING)
        state = dict(self._device_optimizer.state_dict()) if self._device_optimizer is not None else {}
        # Only a compiled model is ever wrapped (see _wrap_training_model), so destroy() unwraps it; the next
        # training call wraps the step again.
        old.destroy()
        self._compiled_rows.pop(RunningStage.TRAINING, None)
        self._compiled_structure.pop(RunningStage.TRAINING, None)
        self._rebuild_device_optimizer(state)

    @override
    def setup_optimizers(self, trainer: Trainer) -> None:
        super().setup_optimizers(trainer)
        if len(self.optimizers) != 1:
            raise ConfigurationError(
                f"configure_optimizers returned {len(self.optimizers)} optimizers; IPUs support exactly one. Combine "
                "the parameter groups into one optimizer."
            )
        # Lightning zeroes the host optimizer's gradients before every step: it must read no parameter.
        install_parameterless_zero_grad(self.optimizers[0])

    # -- dataloaders ---------------------------------------------------------------------------------------------

    @override
    def process_dataloader(self, dataloader: object) -> object:
        trainer = self.lightning_module.trainer if self.lightning_module is not None else None
        stage = trainer.state.stage if trainer is not None else None
        if stage is None or stage not in _STAGE_NAMES:
            return dataloader
        name = f"{stage.dataloader_prefix}_dataloader"
        return to_poptorch_loader(dataloader, self._stage_options(stage), self._poptorch, name)

    # -- steps -------------------------------------------------------------------------------------------------

    def _executor(self, stage: RunningStage, dataloader_idx: int, rows: int | None) -> Any:
        """The model for this stage and dataloader; a batch of another size (the last one) gets its own model."""
        base: Any = RunningStage.VALIDATING if stage == RunningStage.SANITY_CHECKING else stage
        key: Any = (base, dataloader_idx) if dataloader_idx else base
        compiled_rows = self._compiled_rows.setdefault(key, rows)
        if stage == RunningStage.TRAINING and rows is not None and compiled_rows != rows:
            # The batch size changed (Tuner.scale_batch_size): poptorch needs a new model for the new shape.
            self._rebuild_training_model(f"the training batches now hold {rows} samples instead of {compiled_rows}")
            self._compiled_rows[key] = rows
        elif stage != RunningStage.TRAINING and rows is not None and compiled_rows != rows:
            key = (base, dataloader_idx, rows)
        executor = self.poptorch_models.get(key)
        if executor is not None and stage != RunningStage.TRAINING:
            if self._compiled_structure.get(key) != self._structure(training=False):
                # A callback changed the weights (pruning's weight_orig and weight_mask): compile again.
                self.poptorch_models.pop(key).destroy()
                executor = None
        if executor is None and stage == RunningStage.TRAINING:
            if self._device_optimizer is None or self._step_module is None:
                raise ConfigurationError("The IPU training model is set up by Trainer.fit only.")
            return self._wrap_training_model()
        if executor is None:
            assert self._step_module is not None
            if isinstance(key, tuple) and len(key) == 3:
                name = _STAGE_NAMES[stage]
                rank_zero_warn(
                    f"The last {name} batch holds {rows} samples instead of {compiled_rows}: poptorch compiles a "
                    f"second {name} model for that shape, which takes minutes on IPUs. Choose a batch size that "
                    "divides the dataset to compile one model."
                )
            executor = self._poptorch.inferenceModel(self._step_module, self._stage_options(stage))
            self.poptorch_models[key] = executor
            self._compiled_structure[key] = self._structure(training=False)
        return executor

    def _detach_others(self, keep: Any) -> None:
        # Every model holds its own IPUs; only the one about to run may stay attached.
        for executor in self.poptorch_models.values():
            if executor is not keep and executor.isAttachedToDevice():
                executor.detachFromDevice()

    def detach_models(self) -> None:
        """Release the IPUs of every compiled model (done at the end of each stage)."""
        self._detach_others(keep=None)

    @staticmethod
    def _factor(options: Any) -> int:
        return int(
            options.device_iterations
            * (options.replication_factor // options.input_group_size)
            * options.Training.gradient_accumulation
        )

    def _prepare_input(self, args: tuple[Any, ...], factor: int) -> tuple[Any, ...]:
        """Lists become tuples; Python numbers (``batch_idx``) become one value per micro-batch.

        poptorch compiles Python numbers into the graph as constants, so a changing ``batch_idx`` would not match
        the compiled model.
        """

        def convert(value: Any) -> Any:
            if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
                return tuple(convert(item) for item in value)
            if isinstance(value, Mapping):
                return type(value)({key: convert(item) for key, item in value.items()})  # type: ignore[call-arg]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return torch.tensor(value, device=self.root_device).unsqueeze(0).repeat(factor)
            return value

        return tuple(convert(arg) for arg in args)

    def _trim(self, args: tuple[Any, ...], rows: int, factor: int) -> tuple[Any, ...]:
        """Cut an evaluation batch to a multiple of ``factor`` rows (the device splits it evenly), with a warning."""
        kept = rows - rows % factor
        rank_zero_warn(
            f"An evaluation batch of {rows} samples is cut to {kept}: each IPU host call splits its batch into "
            f"{factor} equal micro-batches (device_iterations x replicas). Choose batch_size, devices and "
            "device_iterations so that they divide the dataset to evaluate every sample."
        )

        def cut(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == rows:
                return value[:kept]
            if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
                return type(value)(cut(item) for item in value)
            if isinstance(value, Mapping):
                return type(value)({key: cut(item) for key, item in value.items()})  # type: ignore[call-arg]
            return value

        return (cut(args[0]), *args[1:])

    def _step(self, stage: RunningStage, *args: Any) -> Any:
        dataloader_idx = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        rows = _rows(args[0]) if args else None
        if stage != RunningStage.TRAINING and rows is not None:
            factor = self._factor(self._resolved_opts[False])
            if rows % factor:
                if rows < factor:
                    rank_zero_warn(f"An evaluation batch of {rows} samples is skipped: it is smaller than {factor}.")
                    return None
                args = self._trim(args, rows, factor)
                rows -= rows % factor
        executor = self._executor(stage, dataloader_idx, rows)
        self._detach_others(keep=executor)
        poptorch = self._poptorch
        compiled = executor.isCompiled()
        prepared = self._prepare_input(args, self._factor(executor.options))
        try:
            if compiled:
                output, logged = executor(*prepared)
            else:
                # This call compiles: poptorch moves the module tree to the IPU and back only its weights.
                assert self.lightning_module is not None
                with metric_states_kept_on_host(self.lightning_module):
                    output, logged = executor(*prepared)
        except (poptorch.Error, AssertionError) as err:
            # poptorch reports many option, batch and block errors as AssertionError (options.py:720,
            # _poplar_executor.py:1521), the others as poptorch.Error.
            if compiled:
                raise
            message = err.message if isinstance(err, poptorch.Error) else str(err)
            raise ConfigurationError(
                f"poptorch could not compile the {_STAGE_NAMES[stage]} model: {message}\n"
                f"{_advice(message, stage, executor.options)}"
            ) from err
        if not compiled:
            # The step's Python ran once, while this call compiled it: what it logged names this executor's outputs.
            assert self._step_module is not None
            self._log_records[id(executor)] = list(self._step_module.log_book.records)
        self._log_on_host(self._log_records[id(executor)], logged)
        return output

    def _log_on_host(self, records: list[Any], logged: tuple[torch.Tensor, ...]) -> None:
        module = self.lightning_module
        assert module is not None
        values = iter(logged)
        for name, kwargs, constant in records:
            if constant is not None:
                # A Python number logged in the step: a constant of the compiled step, kept on the host.
                module.log(name, constant, **kwargs)
                continue
            # The device returns the value per micro-batch (or replica) the output mode keeps: log their mean.
            module.log(name, next(values).detach().float().mean(), **kwargs)

    @staticmethod
    def _scalar_loss(output: Any) -> Any:
        if isinstance(output, torch.Tensor) and output.dim() > 0:
            return output.float().mean()
        if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor) and output["loss"].dim() > 0:
            return {**output, "loss": output["loss"].float().mean()}
        return output

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._scalar_loss(self._step(RunningStage.TRAINING, *args, *kwargs.values()))

    @override
    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        trainer = self.lightning_module.trainer if self.lightning_module is not None else None
        stage = trainer.state.stage if trainer is not None else RunningStage.VALIDATING
        return self._step(stage or RunningStage.VALIDATING, *args, *kwargs.values())

    @override
    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._step(RunningStage.TESTING, *args, *kwargs.values())

    @override
    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._step(RunningStage.PREDICTING, *args, *kwargs.values())

    @override
    def backward(self, closure_loss: torch.Tensor, optimizer: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        # The compiled training step already ran backward and the weight updates.
        return closure_loss

    @override
    def batch_to_device(self, batch: Any, device: torch.device | None = None, dataloader_idx: int = 0) -> Any:
        batch = super().batch_to_device(batch, device, dataloader_idx)
        return self.precision_plugin.convert_input(batch)

    def _check_accumulation_unchanged(self) -> None:
        trainer = self._trainer
        if trainer is None or trainer.accumulate_grad_batches == 1:
            return
        if self._scheduled_accumulation and trainer.accumulate_grad_batches == self._accumulation:
            # The constant schedule re-sets the factor every epoch; the device already accumulates it.
            trainer.accumulate_grad_batches = 1
            return
        raise ConfigurationError(
            f"accumulate_grad_batches was changed to {trainer.accumulate_grad_batches} during fit, after the IPU "
            f"training model was compiled with Training.gradientAccumulation({self._accumulation}). poptorch compiles "
            "the accumulation into the model and the dataloader's batch, so it cannot change during a run: set it "
            "once, with Trainer(accumulate_grad_batches=N) or GradientAccumulationScheduler({0: N})."
        )

    @override
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._check_accumulation_unchanged()
        compiled = self._compiled_structure.get(RunningStage.TRAINING)
        # What trains is checked at the start of an epoch, where callbacks change it (BackboneFinetuning unfreezes
        # and adds a parameter group, ModelPruning re-parametrizes weights). Not at every step: reading a parameter's
        # shape or requires_grad copies every weight from the IPUs to the host (_poplar_executor.py:319-333).
        executor = self.poptorch_models.get(RunningStage.TRAINING)
        if executor is not None and not executor.isCompiled():
            self._prepare_training_model(executor)
        elif batch_idx == 0 and executor is not None and compiled != self._structure(training=True):
            self._rebuild_training_model("the model's parameters, what trains, or the optimizer's groups changed")
        # Learning-rate schedulers change the host optimizer: hand its hyper-parameters to the device every step.
        executor = self.poptorch_models.get(RunningStage.TRAINING)
        if executor is not None and self._device_optimizer is not None:
            self._set_device_optimizer(executor)
        if batch_idx == 0:
            # Callbacks may have edited the host weights between epochs (weight averaging, pruning, rescaling).
            self.copy_weights_to_device()

    def _set_device_optimizer(self, executor: Any) -> None:
        """Hand the host optimizer's current hyper-parameters to the device; a refused change says which and why."""
        sync_hyperparameters(self.optimizers[0], self._device_optimizer)
        poptorch = self._poptorch
        try:
            executor.setOptimizer(self._device_optimizer)
        except (poptorch.Error, AssertionError, ValueError) as err:
            raise ConfigurationError(
                refused_change_message(
                    self.optimizers[0], self._device_optimizer, self._accepted_hyperparameters, err, poptorch
                )
            ) from err
        self._accepted_hyperparameters = hyperparameters(self._device_optimizer)

    def copy_weights_to_device(self) -> None:
        """Copy the host model's weights to the attached training model on the IPUs.

        poptorch copies host weights to the device only when a model is compiled or attached, when
        ``copyWeightsToDevice()`` or the executor's ``load_state_dict`` is called (poptorch 3.4
        ``_poplar_executor.py:414-474``); an in-place edit of ``pl_module``'s parameters is otherwise never seen by
        the device, and the next step overwrites it. The strategy calls this at the start of every training epoch;
        a callback that edits the weights in the middle of an epoch calls it after its edit.

        Example:
            >>> class Shrink(Callback):  # doctest: +SKIP
            ...     def on_train_batch_end(self, trainer, pl_module, *args):
            ...         with torch.no_grad():
            ...             for p in pl_module.parameters():
            ...                 p.mul_(0.99)
            ...         trainer.strategy.copy_weights_to_device()
        """
        executor = self.poptorch_models.get(RunningStage.TRAINING)
        if executor is None or not executor.isAttachedToDevice():
            # Compiling or attaching uploads the host weights anyway.
            return
        # The host copy first: the device's weights may be newer than the host's (poptorch copies them lazily).
        executor.copyWeightsToHostIfNeeded()
        executor.copyWeightsToDevice()

    @override
    def on_train_end(self) -> None:
        self.detach_models()

    @override
    def on_validation_end(self) -> None:
        self.detach_models()

    @override
    def on_test_end(self) -> None:
        self.detach_models()

    @override
    def on_predict_end(self) -> None:
        self.detach_models()

    # -- checkpoints -------------------------------------------------------------------------------------------

    @override
    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer state in poptorch's format: ``{ipu_state, ipu_param, state, param_groups}``.

        The device holds the optimizer's state (momentum, Adam moments) in ``ipu_state``; the host optimizer never
        sees it. After fit, the device's last state is kept for checkpoints saved then.
        """
        if not self.optimizers or optimizer is not self.optimizers[0]:
            return dict(optimizer.state_dict())
        if self._device_optimizer is not None:
            sync_hyperparameters(optimizer, self._device_optimizer)
            return dict(self._device_optimizer.state_dict())
        if self._ipu_optimizer_state is not None:
            return {**self._ipu_optimizer_state, **optimizer.state_dict()}
        return dict(optimizer.state_dict())

    @override
    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        """Resume the device optimizer from poptorch's state; a host optimizer's state starts it afresh, with a warning.

        poptorch loads only its own format (``Only IPU optimizer states can be loaded onto the IPU.``), and the names
        of the device's state tensors are the compiler's, so a checkpoint written by a torch optimizer on the host
        (CPU, GPU) gives its hyper-parameters to the IPU optimizer but not its moments.
        """
        states = checkpoint.get("optimizer_states") or []
        host_state = bool(states) and not ("ipu_state" in states[0] and "ipu_param" in states[0])
        if host_state and self.optimizers and self.optimizers[0] is self._device_optimizer:
            # The user's own poptorch.optim optimizer refuses a torch state: give it the torch part (hyper-parameters
            # and step counts, which learning-rate schedulers read) as a twin gets it.
            torch.optim.Optimizer.load_state_dict(self.optimizers[0], states[0])
        else:
            super().load_optimizer_state_dict(checkpoint)
        if self._device_optimizer is None or not states:
            return
        if self._optimizer_structure != self._structure(training=True):
            # A callback changed the groups after setup (a resumed BaseFinetuning restores its groups in
            # on_fit_start): the device optimizer follows the host one before it loads the state.
            self._build_device_optimizer()
        state = states[0]
        if not host_state:
            self._device_optimizer.load_state_dict(upgrade_older_emulator_state(dict(state), self._device_optimizer))
            return
        if state.get("state"):
            rank_zero_warn(
                "The checkpoint's optimizer state was saved by a torch optimizer on the host (no 'ipu_state'): its "
                "momentum / moment buffers cannot be written to IPUs, so the IPU optimizer resumes without them "
                "(hyper-parameters and step counts are restored). Resume from a checkpoint saved on IPUs to keep them."
            )
        sync_hyperparameters(self.optimizers[0], self._device_optimizer)

    @override
    def teardown(self) -> None:
        self._running_trainer = None
        if self._trainer is not None:
            self._trainer.accumulate_grad_batches = self._accumulation
            self._trainer = None
        for executor in self.poptorch_models.values():
            executor.destroy()
        if self._device_optimizer is not None:
            # The device's last optimizer state, for checkpoints saved after fit.
            self._ipu_optimizer_state = dict(self._device_optimizer.state_dict())
        for optimizer in self.optimizers:
            remove_parameterless_zero_grad(optimizer)
        self.poptorch_models.clear()
        self._compiled_rows.clear()
        self._compiled_structure.clear()
        self._log_records.clear()
        self._step_module = None
        self._device_optimizer = None
        if self.autoreport:
            if self._saved_engine_options is None:
                os.environ.pop(_ENGINE_OPTIONS, None)
            else:
                os.environ[_ENGINE_OPTIONS] = self._saved_engine_options
        super().teardown()


IPUPlugin = IPUStrategy


def _advice(message: str, stage: RunningStage, options: Any) -> str:
    """What to change in the LightningModule or the Trainer for a compile error poptorch gives."""
    if "No active Block" in message:
        return (
            "On IPUs every operation of a pipelined step must run inside a block: once a `with poptorch.Block(...)` "
            f"ends, nothing may be computed until the next one starts. Compute everything the {_STAGE_NAMES[stage]} "
            "step returns or logs (the loss, accuracies) inside the last `with poptorch.Block(...)`, or start the "
            "blocks with poptorch.BeginBlock / poptorch.Block.start(...), which last until the next block starts. "
            "(IPUStrategy puts its own loss marker inside the step's last block.)"
        )
    match = re.search(r"number of pipeline stages \((\d+)\)", message)
    if match is not None:
        needed = int(match.group(1))
        counting = (
            "poptorch counts a pipeline stage at every change of IPU, starting from IPU 0, where the layers before "
            "the first block run (a model whose only block is BeginBlock(head, ipu_id=1) has 2 stages)"
        )
        if stage == RunningStage.TRAINING:
            current = options.Training.gradient_accumulation
            return (
                f"The training pipeline has {needed} stages ({counting}; training adds a backward stage for every "
                f"forward stage but the last), so it needs Trainer(accumulate_grad_batches={needed}) or more; it "
                f"has {current}. Pass accumulate_grad_batches>={needed}, or put the layers before the first block "
                "on that block's IPU (one stage less per IPU change)."
            )
        return (
            f"The {_STAGE_NAMES[stage]} pipeline has {needed} stages ({counting}), so it needs "
            f"IPUStrategy(device_iterations={needed}) or more; it has {options.device_iterations}. Pass "
            f"device_iterations>={needed} (or inference_opts with deviceIterations({needed}))."
        )
    return _HINT


def _check_report_directory(path: str | os.PathLike[str]) -> None:
    """Refuse a report directory that cannot be one: the path, or a folder above it, is an existing file."""
    for candidate in (Path(path), *Path(path).parents):
        if candidate.exists():
            if not candidate.is_dir():
                where = "is" if candidate == Path(path) else f"is inside {str(candidate)!r}, which is"
                raise ConfigurationError(
                    f"IPUStrategy(autoreport_dir={path!r}) is not accepted: that path {where} a file, and the "
                    "reports go into a directory. Pass a directory path (it is created if missing) or None."
                )
            return
