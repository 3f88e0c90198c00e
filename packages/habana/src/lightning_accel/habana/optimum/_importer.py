"""Reading optimum-habana's ``gaudi_config.json`` and training arguments into the pieces of a Lightning run."""

from __future__ import annotations

import dataclasses
import difflib
import enum
import importlib
import json
import math
import os
import shlex
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_accel.core.errors import ConfigurationError

from ._fsdp import fsdp_strategy_arguments
from ._table import FIELDS, ISSUE, Field, Source

if TYPE_CHECKING:
    import torch
    from lightning.pytorch import Callback, LightningModule

__all__ = ["OptimumImport", "import_optimum_habana", "read_fields"]

_OPTIMIZERS = {"adamw_torch": "adamw", "adamw_torch_fused": "adamw", "adamw_hf": "adamw", "sgd": "sgd"}
# The shapes built here without transformers (with no lr_scheduler_kwargs); the others come from transformers.
_SCHEDULERS = ("linear", "constant", "constant_with_warmup", "cosine")
# transformers' schedulers that step on an evaluation metric, not on the step count.
_METRIC_SCHEDULERS = ("reduce_lr_on_plateau", "greedy")
_FSDP_SHARDING = {
    "full_shard": "FULL_SHARD",
    "shard_grad_op": "SHARD_GRAD_OP",
    "hybrid_shard": "HYBRID_SHARD",
    "no_shard": "NO_SHARD",
}
_LAZY = "PT_HPU_LAZY_MODE"
_LOWER_LIST = "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST"
_FP32_LIST = "PT_HPU_AUTOCAST_FP32_OPS_LIST"
_NO_LOGGER: tuple[Any, ...] = (None, "all", ["all"])
_OFF_LOGGER: tuple[Any, ...] = ("none", [], ["none"])


def _plain(value: Any) -> Any:
    # Enums (IntervalStrategy, SchedulerType, ...) as their values, as to_dict() and JSON give them.
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def read_fields(source: Any, argument: str) -> dict[str, Any]:
    """The fields of ``source``: a mapping, a JSON file path, or an object (a dataclass, or one with attributes).

    Args:
        source: What the user passed.
        argument: The argument's name, for error messages.

    Raises:
        ConfigurationError: For a missing or malformed file, or a value of another kind.
    """
    if source is None:
        return {}
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            path = path / "gaudi_config.json" if argument == "gaudi_config" else path / "training_args.json"
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigurationError(
                f"{argument}={str(source)!r}: no such file. Accepted: the path of a JSON file (or a folder holding "
                f"{path.name}), a dict, or the optimum-habana object. Hub names are not downloaded: fetch the file "
                "and pass its path."
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigurationError(
                f"{argument}={str(source)!r} cannot be read as JSON ({exc}). Accepted: a JSON object of fields."
            ) from exc
        if not isinstance(loaded, dict):
            raise ConfigurationError(
                f"{argument}={str(source)!r} holds a JSON {type(loaded).__name__}, not an object. Accepted: a JSON "
                "object mapping field names to values, as gaudi_config.json and TrainingArguments.to_json_string() "
                "write."
            )
        return {str(k): _plain(v) for k, v in loaded.items()}
    if isinstance(source, Mapping):
        return {str(k): _plain(v) for k, v in source.items()}
    if dataclasses.is_dataclass(source) and not isinstance(source, type):
        return {f.name: _plain(getattr(source, f.name)) for f in dataclasses.fields(source) if f.init}
    if hasattr(source, "__dict__") and not isinstance(source, type):
        # GaudiConfig keeps its fields as plain attributes; private ones are its own bookkeeping.
        return {k: _plain(v) for k, v in vars(source).items() if not k.startswith("_")}
    raise ConfigurationError(
        f"{argument}={source!r} ({type(source).__name__}) is not accepted. Accepted: None, a dict, the path of a "
        "JSON file, or optimum-habana's GaudiConfig / GaudiTrainingArguments object."
    )


def _check_fields(given: Mapping[str, Any], source: Source, argument: str) -> None:
    table = FIELDS[source]
    unknown = [name for name in given if name not in table]
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, list(table), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigurationError(
            f"{argument}: unknown field(s) {', '.join(hints)}: not a field of optimum-habana 1.21's {source}. "
            f"Accepted: {', '.join(sorted(table))}."
        )
    refused = [
        f"{name}={given[name]!r}: {table[name].reason} (accepted: the default, {table[name].default!r})"
        for name in given
        if table[name].action == "refused" and not table[name].accepted(given[name])
    ]
    if refused:
        raise ConfigurationError(
            f"{argument}: these settings have no lightning-accel equivalent and are refused rather than dropped:\n  "
            + "\n  ".join(refused)
            + "\nRemove them (or set them to their default) to import the rest."
        )


def _refuse(message: str) -> ConfigurationError:
    return ConfigurationError(message)


@dataclasses.dataclass
class OptimumImport:
    """What a Lightning run needs from an optimum-habana run's ``gaudi_config.json`` and training arguments.

    Built by :func:`import_optimum_habana`. ``trainer_kwargs()`` gives ``Trainer(**kwargs)``'s arguments (the
    accelerator, strategy, precision plugin with the operator lists, compile and HPU-graph callbacks, metrics,
    checkpointing, logger and profiler); ``configure_optimizers(module)`` the optimizer and scheduler; and
    ``dataloader_kwargs(...)`` / ``prepare_model(model)`` what belongs to the data and the model.

    Attributes:
        precision: ``"bf16-mixed"``, ``"fp8"`` or ``"32-true"``.
        autocast_bf16_ops: Operators run in bfloat16 (``None``: the SDK's list).
        autocast_fp32_ops: Operators run in float32 (``None``: the SDK's list).
        fused_clip_norm: Clip with the SDK's ``FusedClipNorm``.
        lazy_mode: Whether the run needs the SDK's lazy mode (``PT_HPU_LAZY_MODE=1``).
        compile: ``HPUCompile`` arguments, or ``None``.
        graphs: ``HPUGraphs`` arguments, or ``None``.
        profiler: ``HPUProfiler`` arguments, or ``None``.
        strategy: ``("single" | "ddp" | "fast_ddp" | "context_parallel" | "fsdp" | "deepspeed", arguments)``.
        trainer: Plain ``Trainer`` arguments.
        checkpoint: ``ModelCheckpoint`` arguments, or ``None`` (checkpointing off).
        logger: ``"default"``, ``"off"`` or ``("tensorboard", save_dir)``.
        optimizer: Optimizer settings (``name``, ``lr``, ``betas``, ``eps``, ``weight_decay``, ``fused``).
        scheduler: Scheduler settings (``name``, ``warmup_steps``, ``warmup_ratio``).
        dataloaders: ``DataLoader`` arguments for ``"train"`` and ``"eval"``.
        model_kwargs: Arguments for ``from_pretrained`` / the model config (``attn_implementation``).
        model_setup: What :meth:`prepare_model` applies (gradient checkpointing, FusedSDPA, fp8 layers and their
            ``minimize_memory``, ZeRO-3 leaf blocks).
        seed: The seed ``trainer_kwargs()`` seeds with.
        tokens_per_second: Whether throughput is also reported in tokens (``length_fn`` needed).
        dynamo: ``DynamoSettings`` arguments (``cache_size_limit``, ...), or ``None``.
        pipelining: Whether a lazy-mode step mark separates forward and backward (``PipelineForwardBackward``).
        adjust_throughput: Whether throughput leaves out validation and checkpoint time
            (``AdjustedThroughputMonitor``).
        sdp_on_bf16: Whether torch's math attention reduces in bfloat16 during the run (``SDPOnBF16``).
        warmup: Under DeepSpeed, the scheduler warm-up arguments that fill its config's ``"auto"`` step counts.
        throughput_warmup_batches: Training batches left out of the throughput summary (``ThroughputAfterWarmup``);
            ``throughput_warmup_steps`` times ``gradient_accumulation_steps``, as optimum-habana counts them.
        validate_in_fit: Whether ``fit`` validates (``eval_strategy`` other than ``"no"``); ``trainer.validate``
            runs either way.
        load_best: Whether the model takes the weights of the best checkpoint when ``fit`` ends
            (``load_best_model_at_end``).
        workdir: Where operator list files are written.
        given: The fields read, per source.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana.optimum import import_optimum_habana
        >>> run = import_optimum_habana({"use_torch_autocast": True}, {"use_lazy_mode": False})
        >>> run.precision
        'bf16-mixed'
        >>> trainer = Trainer(**run.trainer_kwargs())  # doctest: +SKIP
    """

    precision: str = "32-true"
    autocast_bf16_ops: tuple[str, ...] | None = None
    autocast_fp32_ops: tuple[str, ...] | None = None
    fused_clip_norm: bool = False
    lazy_mode: bool = True
    compile: dict[str, Any] | None = None
    graphs: dict[str, Any] | None = None
    profiler: dict[str, Any] | None = None
    strategy: tuple[str, dict[str, Any]] = ("single", {})
    trainer: dict[str, Any] = dataclasses.field(default_factory=dict)
    checkpoint: dict[str, Any] | None = None
    logger: Any = "default"
    optimizer: dict[str, Any] = dataclasses.field(default_factory=dict)
    scheduler: dict[str, Any] = dataclasses.field(default_factory=dict)
    dataloaders: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    model_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    model_setup: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int | None = 42
    tokens_per_second: bool = False
    dynamo: dict[str, Any] | None = None
    pipelining: bool = False
    adjust_throughput: bool = False
    sdp_on_bf16: bool = False
    throughput_warmup_batches: int = 0
    warmup: dict[str, Any] = dataclasses.field(default_factory=dict)
    validate_in_fit: bool = False
    load_best: bool = False
    workdir: Path = Path(".")
    given: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    _prepared: set[int] = dataclasses.field(default_factory=set, repr=False)

    # ----------------------------------------------------------------------------------------------- environment
    @property
    def environment(self) -> dict[str, str]:
        """The variables the run needs set before the SDK loads (the mode, and the operator list files)."""
        env = {_LAZY: "1" if self.lazy_mode else "0"}
        files = self.op_list_files()
        if files[0] is not None:
            env[_LOWER_LIST] = str(files[0].resolve())
        if files[1] is not None:
            env[_FP32_LIST] = str(files[1].resolve())
        return env

    def export_lines(self) -> str:
        """The ``export`` lines of :attr:`environment`, to put before the command that starts the run."""
        return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in self.environment.items())

    def op_list_files(self) -> tuple[Path | None, Path | None]:
        """The operator list files (written on first call; ``None`` where the config gives no list)."""
        paths: list[Path | None] = []
        for name, ops in (
            ("autocast_bf16_ops.txt", self.autocast_bf16_ops),
            ("autocast_fp32_ops.txt", self.autocast_fp32_ops),
        ):
            if ops is None:
                paths.append(None)
                continue
            path = self.workdir / name
            text = "".join(op + "\n" for op in ops)
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
            paths.append(path)
        return paths[0], paths[1]

    def check_environment(self) -> None:
        """Refuse a process whose SDK runs in the other mode than the run asks for (the mode is fixed at load).

        Raises:
            ConfigurationError: With the ``export`` line to set before the process starts.
        """
        from lightning_accel.habana import sdk

        lazy = bool(sdk.htcore.is_lazy())
        if lazy != self.lazy_mode:
            wanted = "lazy" if self.lazy_mode else "eager"
            why = (
                "use_lazy_mode=True (optimum-habana's default) and no torch_compile"
                if self.lazy_mode
                else "use_lazy_mode=False or torch_compile=True"
            )
            raise ConfigurationError(
                f"The imported run needs the SDK's {wanted} mode ({why}), but the SDK loaded in "
                f"{'lazy' if lazy else 'eager'} mode. The mode is chosen when the SDK loads: start the process with\n"
                f"    export {_LAZY}={int(self.lazy_mode)}\n"
                "or change use_lazy_mode in the training arguments."
            )

    # ----------------------------------------------------------------------------------------------- trainer
    def precision_plugin(self) -> Any:
        """The ``HPUPrecisionPlugin``; ``HPUFSDPPrecision`` under FSDP, ``None`` under DeepSpeed (its config's)."""
        if self.strategy[0] == "deepspeed":
            return None
        if self.strategy[0] == "fsdp":
            # torch FSDP casts parameters and gradients itself: HPUFSDPStrategy takes only its own plugin. The
            # operator lists reach the SDK's autocast through the environment (check_environment).
            from lightning_accel.habana.fsdp_precision import HPUFSDPPrecision

            return HPUFSDPPrecision(self.precision)
        from lightning_accel.habana.precision import HPUPrecisionPlugin

        lower, fp32 = self.op_list_files()
        return HPUPrecisionPlugin(
            self.precision, bf16_file_path=lower, fp32_file_path=fp32, fused_clip_norm=self.fused_clip_norm
        )

    def callbacks(self) -> list[Callback]:
        """The compile, HPU-graph, metrics and checkpoint callbacks."""
        from lightning.pytorch.callbacks import ModelCheckpoint

        from lightning_accel.habana.compilation import HPUCompile
        from lightning_accel.habana.compile_metrics import HPUCompileMetrics
        from lightning_accel.habana.graphs import HPUGraphs

        found: list[Callback] = []
        if self.compile is not None:
            found += [HPUCompile(**self.compile), HPUCompileMetrics()]
        if self.graphs is not None:
            found.append(HPUGraphs(**self.graphs))
        if self.checkpoint is not None:
            found.append(ModelCheckpoint(**self.checkpoint))
        if self.model_setup:
            found.append(_PreparedCheck(self))
        if not self.validate_in_fit:
            found.append(_NoValidationInFit())
        if self.load_best:
            found.append(_LoadBestAtEnd())
        if self.dynamo is not None:
            from lightning_accel.habana.dynamo_settings import DynamoSettings

            found.append(DynamoSettings(**self.dynamo))
        if self.pipelining:
            from lightning_accel.habana.lazy_steps import PipelineForwardBackward

            found.append(PipelineForwardBackward())
        if self.sdp_on_bf16:
            from lightning_accel.habana.sdp_settings import SDPOnBF16

            found.append(SDPOnBF16())
        if self.strategy[0] == "deepspeed":
            from ._deepspeed import DeepSpeedAutoFill, pending_auto_keys

            if pending_auto_keys(self.strategy[1]["config"]):
                found.append(DeepSpeedAutoFill(self.warmup))
        return found

    def _strategy(self, devices: int | str) -> Any:
        kind, arguments = self.strategy
        if kind == "deepspeed":
            try:
                deepspeed_hpu = importlib.import_module("lightning_accel.deepspeed_hpu")
            except ImportError as exc:
                raise ConfigurationError(
                    f"training_args: deepspeed needs lightning-accel's DeepSpeed integration, which is not installed "
                    f"({exc}). Install it: pip install 'lightning-accel[deepspeed-hpu]'."
                ) from exc
            return deepspeed_hpu.HPUDeepSpeedStrategy(**arguments)
        if kind == "fsdp":
            from lightning_accel.habana.strategies import HPUFSDPStrategy

            return HPUFSDPStrategy(**arguments)
        if kind == "context_parallel":
            # Built even on one device: the strategy then refuses a size that does not divide the world size.
            from lightning_accel.habana.context_parallel import HPUContextParallelStrategy

            return HPUContextParallelStrategy(**arguments)
        if devices == 1:
            return "auto"
        if kind == "fast_ddp":
            import torch

            from lightning_accel.habana.strategies.fast_ddp import HPUFastDDPStrategy

            settings = dict(arguments)
            return HPUFastDDPStrategy(**{**settings, "buffer_dtype": getattr(torch, settings["buffer_dtype"])})
        from lightning_accel.habana.strategies import HPUParallelStrategy

        return HPUParallelStrategy(**arguments)

    def trainer_kwargs(
        self,
        devices: int | str = 1,
        batch_size_fn: Callable[[Any], int] | None = None,
        length_fn: Callable[[Any], int] | None = None,
    ) -> dict[str, Any]:
        """``Trainer(**kwargs)``'s arguments; seeds the run (as the Hugging Face Trainer does when it is built).

        Args:
            devices: HPUs per node (gaudi_spawn.py's ``--world_size``).
            batch_size_fn: Samples in a batch: adds Lightning's ``ThroughputMonitor`` (optimum-habana's
                samples-per-second report).
            length_fn: Tokens in a batch: needed with ``include_tokens_per_second``.

        Raises:
            ConfigurationError: When the SDK runs in the other mode, or ``include_tokens_per_second`` lacks
                ``length_fn``.
        """
        self.check_environment()
        kwargs: dict[str, Any] = {"accelerator": "hpu", "devices": devices, **self.trainer}
        kwargs["strategy"] = self._strategy(devices)
        plugin = self.precision_plugin()
        if plugin is None:
            kwargs["precision"] = self.precision
        else:
            kwargs["plugins"] = [plugin]
        callbacks = self.callbacks()
        if self.tokens_per_second and (batch_size_fn is None or length_fn is None):
            raise ConfigurationError(
                "include_tokens_per_second=True: pass trainer_kwargs(batch_size_fn=..., length_fn=...), the samples "
                "and tokens of a batch, so that Lightning's ThroughputMonitor reports tokens per second; or drop the "
                "field."
            )
        if self.adjust_throughput and batch_size_fn is None:
            raise ConfigurationError(
                "adjust_throughput=True: pass trainer_kwargs(batch_size_fn=...), the samples of a batch, so that "
                "AdjustedThroughputMonitor reports throughput without validation and checkpoint time; or drop the "
                "field."
            )
        if self.throughput_warmup_batches and batch_size_fn is None:
            raise ConfigurationError(
                "throughput_warmup_steps > 0: pass trainer_kwargs(batch_size_fn=...), the samples of a batch, so that "
                "ThroughputAfterWarmup reports train_samples_per_second without the warm-up steps; or drop the field."
            )
        if self.throughput_warmup_batches:
            from lightning_accel.core.callbacks import ThroughputAfterWarmup

            assert batch_size_fn is not None
            callbacks.append(ThroughputAfterWarmup(self.throughput_warmup_batches, batch_size_fn, length_fn))
        if batch_size_fn is not None and self.adjust_throughput:
            from lightning_accel.habana.adjusted_throughput import AdjustedThroughputMonitor

            callbacks.append(AdjustedThroughputMonitor(batch_size_fn, length_fn))
        elif batch_size_fn is not None:
            from lightning.pytorch.callbacks import ThroughputMonitor

            callbacks.append(ThroughputMonitor(batch_size_fn, length_fn))
        kwargs["callbacks"] = callbacks
        if self.checkpoint is None:
            kwargs["enable_checkpointing"] = False
        if self.logger == "off":
            kwargs["logger"] = False
        elif isinstance(self.logger, tuple):
            from lightning.pytorch.loggers import TensorBoardLogger

            try:
                kwargs["logger"] = TensorBoardLogger(save_dir=self.logger[1])
            except ModuleNotFoundError as exc:
                raise ConfigurationError(
                    f"training_args: report_to='tensorboard' needs TensorBoard, which is not installed ({exc}). "
                    "Install it (pip install tensorboard), or set report_to='none' or leave it unset."
                ) from exc
        if self.profiler is not None:
            import torch

            from lightning_accel.habana.profiler import HPUProfiler

            settings = dict(self.profiler)
            schedule = torch.profiler.schedule(
                wait=0, warmup=settings.pop("warmup"), active=settings.pop("active"), repeat=1
            )
            kwargs["profiler"] = HPUProfiler(schedule=schedule, **settings)
        if self.seed is not None:
            from lightning.pytorch import seed_everything

            seed_everything(self.seed, workers=True)
        return kwargs

    # ----------------------------------------------------------------------------------------------- module side
    def configure_optimizers(self, module: LightningModule) -> dict[str, Any]:
        """The optimizer and step-wise scheduler, for ``LightningModule.configure_optimizers`` to return.

        Weight decay skips biases and normalisation weights, as the Hugging Face Trainer's does.
        """
        import torch

        decay: list[torch.nn.Parameter] = []
        no_decay: list[torch.nn.Parameter] = []
        placed: set[int] = set()
        for sub in module.modules():
            norm = "norm" in type(sub).__name__.lower()
            for name, parameter in sub.named_parameters(recurse=False):
                # A weight shared by two modules (tied embeddings) goes in once: listed twice, AdamW would update it
                # twice per step (and DeepSpeed refuses to start).
                if parameter.requires_grad and id(parameter) not in placed:
                    placed.add(id(parameter))
                    (no_decay if norm or name == "bias" else decay).append(parameter)
        groups = [
            {"params": decay, "weight_decay": self.optimizer["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        settings = self.optimizer
        optimizer: torch.optim.Optimizer
        if settings["name"] == "sgd":
            optimizer = torch.optim.SGD(groups, lr=settings["lr"])
        elif settings["fused"]:
            from lightning_accel.habana.fused import fused_adamw

            optimizer = fused_adamw(groups, lr=settings["lr"], betas=settings["betas"], eps=settings["eps"])
        else:
            optimizer = torch.optim.AdamW(groups, lr=settings["lr"], betas=settings["betas"], eps=settings["eps"])
        total = int(module.trainer.estimated_stepping_batches)
        warmup = self.scheduler["warmup_steps"] or math.ceil(self.scheduler["warmup_ratio"] * total)
        kind, kwargs = self.scheduler["name"], self.scheduler.get("kwargs") or {}
        if kind not in _SCHEDULERS or kwargs:
            # The other shapes, and arguments, as the Hugging Face Trainer builds them: transformers' own function.
            from transformers import get_scheduler

            built = get_scheduler(
                kind, optimizer, num_warmup_steps=warmup, num_training_steps=total, scheduler_specific_kwargs=kwargs
            )
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": built, "interval": "step"}}

        def factor(step: int) -> float:
            if kind == "constant":
                return 1.0
            if step < warmup:
                return float(step) / float(max(1, warmup))
            if kind == "constant_with_warmup":
                return 1.0
            progress = float(step - warmup) / float(max(1, total - warmup))
            if kind == "cosine":
                return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
            return max(0.0, 1.0 - progress)

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def dataloader_kwargs(self, split: str = "train") -> dict[str, Any]:
        """``DataLoader`` arguments for ``"train"`` or ``"eval"`` (batch size, workers, drop_last, ...)."""
        if split not in self.dataloaders:
            raise ConfigurationError(f"dataloader_kwargs(split={split!r}): accepted 'train' or 'eval'.")
        return dict(self.dataloaders[split])

    def prepare_model(self, model: torch.nn.Module) -> list[Any]:
        """Apply what the arguments ask of the model: checkpointing, FusedSDPA, fp8 layers and attention, ZeRO-3 leaves.

        Call it before a checkpoint loads: fp8 layers keep their scaling state in the ``state_dict``.

        Returns:
            Handles to undo (``remove()``) where there are any (the FusedSDPA and fp8 attention handles).
        """
        handles: list[Any] = []
        setup = self.model_setup
        if "gradient_checkpointing" in setup:
            enable = getattr(model, "gradient_checkpointing_enable", None)
            if enable is None:
                raise ConfigurationError(
                    f"gradient_checkpointing=True, but {type(model).__name__} has no gradient_checkpointing_enable() "
                    "(a transformers PreTrainedModel has). Pass the transformers model, or drop the field."
                )
            enable(gradient_checkpointing_kwargs=setup["gradient_checkpointing"])
        if "fused_sdpa" in setup:
            from lightning_accel.habana.fused import use_fused_sdpa

            handles.append(use_fused_sdpa(model, **setup["fused_sdpa"]))
        if "fp8" in setup:
            plugin = self.precision_plugin()
            model = plugin.convert_modules(model, replace_layers=True)
        if "fp8_fused_attention" in setup:
            from lightning_accel.habana.fp8_attention import use_fp8_fused_attention

            handles.append(use_fp8_fused_attention(model, **setup["fp8_fused_attention"]))
        if "fp8_minimize_memory" in setup:
            _minimize_fp8_memory(model)
        if "zero3_leaf_promotion" in setup:
            _promote_zero3_leaves(model)
        if "no_kv_cache" in setup:
            config: Any = getattr(model, "config", None)
            if getattr(config, "use_cache", False):
                from lightning.pytorch.utilities import rank_zero_info

                config.use_cache = False  # as transformers' gradient_checkpointing_enable does for its own
                rank_zero_info(f"{setup['no_kv_cache']}: the model's KV cache (config.use_cache) is off for training.")
        self._prepared.add(id(model))
        return handles


def _minimize_fp8_memory(model: torch.nn.Module) -> None:
    # optimum-habana builds its Transformer Engine layers with minimize_memory=True (PT_HPU_FP8_MINIMIZE_MEMORY); the
    # SDK's Linear reads the attribute at each forward, so setting it on the converted layers has the same effect: the
    # fp8 weight is cast again in backward instead of being kept from forward.
    from lightning_accel.habana import sdk

    linear = sdk.transformer_engine_module().Linear
    layers = [m for m in model.modules() if isinstance(m, linear)]
    if not layers:
        raise ConfigurationError(
            f"minimize_memory=True, but {type(model).__name__} has no fp8 Linear layer (transformer_engine.Linear) "
            "after the fp8 conversion, so nothing would use it. Give prepare_model the model with torch.nn.Linear "
            "layers, or drop the field."
        )
    for layer in layers:
        layer.minimize_memory = True


# The blocks optimum-habana's apply_zero3_leaf_promotion makes ZeRO-3 leaves, per model type (transformers' classes,
# of which optimum-habana's Gaudi* classes are subclasses).
_ZERO3_LEAVES = {
    "llama": "LlamaDecoderLayer",
    "mixtral": "MixtralSparseMoeBlock",
    "qwen3_moe": "Qwen3MoeSparseMoeBlock",
}


def _promote_zero3_leaves(model: torch.nn.Module) -> None:
    # A ZeRO-3 leaf gathers its parameters once for the whole block instead of per submodule: fewer, larger
    # all-gathers (and no hooks inside the block, which MoE blocks that skip experts need).
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in _ZERO3_LEAVES:
        raise ConfigurationError(
            f"use_zero3_leaf_promotion=True: the model's type ({type(model).__name__}, config.model_type="
            f"{model_type!r}) has no registered leaf block (optimum-habana skips it then, without a word). Accepted: "
            f"a transformers model of type {', '.join(sorted(_ZERO3_LEAVES))}; for another model call DeepSpeed's "
            "deepspeed.utils.set_z3_leaf_modules(model, [YourBlock]) yourself and drop the field."
        )
    name = _ZERO3_LEAVES[model_type]
    classes = sorted({type(m) for m in model.modules() if any(c.__name__ == name for c in type(m).__mro__)}, key=str)
    if not classes:
        raise ConfigurationError(
            f"use_zero3_leaf_promotion=True: the {model_type} model holds no {name}, so no block would be a leaf. Give "
            "prepare_model the transformers model itself."
        )
    try:
        from deepspeed.utils import set_z3_leaf_modules
    except ImportError as exc:
        raise ConfigurationError(
            f"use_zero3_leaf_promotion=True needs DeepSpeed, which is not installed ({exc}). Install it: pip install "
            "'lightning-accel[deepspeed-hpu]'."
        ) from exc
    set_z3_leaf_modules(model, classes)


class _NoValidationInFit:
    """``eval_strategy="no"``: no validation (nor sanity check) inside ``fit``; ``trainer.validate`` still runs."""

    def __new__(cls) -> Any:
        from lightning.pytorch import Callback

        class NoValidationInFit(Callback):
            # limit_val_batches is read when the validation loop sets up its data, after on_fit_start.
            def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
                self.limit = trainer.limit_val_batches
                trainer.limit_val_batches = 0

            def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
                trainer.limit_val_batches = self.limit

        return NoValidationInFit()


class _LoadBestAtEnd:
    """``load_best_model_at_end``: when ``fit`` ends, the model takes the weights of the best checkpoint."""

    def __new__(cls) -> Any:
        from lightning.pytorch import Callback
        from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

        class LoadBestAtEnd(Callback):
            def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
                checkpoint = trainer.checkpoint_callback
                path = getattr(checkpoint, "best_model_path", "")
                if not path:
                    monitor = getattr(checkpoint, "monitor", None)
                    rank_zero_warn(
                        f"load_best_model_at_end: no checkpoint was ranked by {monitor!r} (the module never logged it "
                        "in validation?), so the model keeps the weights of its last step. Log that metric in "
                        "validation_step, or set metric_for_best_model to a metric it logs."
                    )
                    return
                loaded = trainer.strategy.load_checkpoint(path)
                trainer.strategy.load_model_state_dict(loaded)
                rank_zero_info(
                    f"load_best_model_at_end: loaded {path} ({checkpoint.monitor}={float(checkpoint.best_model_score)})"
                )

        return LoadBestAtEnd()


class _PreparedCheck:
    """Refuse a fit whose model was never given to ``prepare_model`` while the arguments ask something of it."""

    def __new__(cls, run: OptimumImport) -> Any:
        from lightning.pytorch import Callback

        class PreparedCheck(Callback):
            def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
                if not any(id(m) in run._prepared for m in pl_module.modules()):
                    raise ConfigurationError(
                        f"The imported arguments ask for {', '.join(sorted(run.model_setup))} on the model, but "
                        "prepare_model(model) was not called on it (or on a module inside the LightningModule). "
                        "Call run.prepare_model(self.model) in the LightningModule's __init__ or configure_model."
                    )

        return PreparedCheck()


def import_optimum_habana(
    gaudi_config: Any = None, training_args: Any = None, *, workdir: str | os.PathLike[str] | None = None
) -> OptimumImport:
    """Convert optimum-habana's ``gaudi_config.json`` and training arguments into a Lightning run's pieces.

    Each field is mapped, refused with the reason, or ignored where it has no bearing on a Lightning run (the table
    in ``docs/migration.md``, generated from :mod:`lightning_accel.habana.optimum._table`). A field at its default
    value requests nothing, so ``GaudiTrainingArguments.to_dict()`` output (every field) imports too.

    Args:
        gaudi_config: A dict, the path of ``gaudi_config.json`` (or its folder), or a ``GaudiConfig``.
            ``None``: the training arguments' ``gaudi_config_name`` when it is a local file, else no Gaudi config.
        training_args: A dict, the path of a JSON file, or a ``GaudiTrainingArguments`` object.
        workdir: Where operator list files are written (the training arguments' ``output_dir``, or the working
            directory).

    Raises:
        ConfigurationError: For an unknown or refused field, a value outside what is accepted, or a combination
            lightning-accel cannot run (each message names the field and what is accepted).

    Example:
        >>> from lightning_accel.habana.optimum import import_optimum_habana
        >>> run = import_optimum_habana(
        ...     {"use_fused_adam": True, "use_fused_clip_norm": True, "use_torch_autocast": True},
        ...     {"learning_rate": 5e-5, "max_steps": 10, "use_lazy_mode": False, "torch_compile": True},
        ... )
        >>> run.precision, run.optimizer["fused"], run.trainer["max_steps"]
        ('bf16-mixed', True, 10)
    """
    args_given = read_fields(training_args, "training_args")
    _check_fields(args_given, "GaudiTrainingArguments", "training_args")
    if gaudi_config is None and args_given.get("gaudi_config_name"):
        name = args_given["gaudi_config_name"]
        if not Path(name).exists():
            raise ConfigurationError(
                f"gaudi_config_name={name!r} is no local file or folder, and the importer downloads nothing. "
                "Accepted: the path of a gaudi_config.json (download it from the Hub first), or pass "
                "import_optimum_habana(gaudi_config=...) yourself."
            )
        gaudi_config = name
    config_given = read_fields(gaudi_config, "gaudi_config")
    _check_fields(config_given, "GaudiConfig", "gaudi_config")
    return _build(config_given, args_given, workdir)


def _values(given: Mapping[str, Any], source: Source) -> dict[str, Any]:
    table: dict[str, Field] = FIELDS[source]
    return {name: given.get(name, row.default) for name, row in table.items()}


def _build(config_given: dict[str, Any], args_given: dict[str, Any], workdir: Any) -> OptimumImport:
    c = _values(config_given, "GaudiConfig")
    a = _values(args_given, "GaudiTrainingArguments")
    run = OptimumImport(given={"GaudiConfig": config_given, "GaudiTrainingArguments": args_given})
    run.workdir = Path(workdir if workdir is not None else (a["output_dir"] or ".")) / "lightning_accel_autocast"
    deepspeed = a["deepspeed"] not in (None, "", {})

    # Precision: bf16 or use_torch_autocast turn on HPU autocast; fp8 is the Transformer Engine plugin.
    if a["fp8"]:
        run.precision = "fp8"
    elif a["bf16"] or c["use_torch_autocast"]:
        run.precision = "bf16-mixed"
    for key in ("autocast_bf16_ops", "autocast_fp32_ops"):
        ops = c[key]
        if ops is None:
            continue
        if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
            raise _refuse(f"gaudi_config: {key}={ops!r} is not accepted. Accepted: a list of ATen operator names.")
        if run.precision != "bf16-mixed":
            raise _refuse(
                f"gaudi_config: {key} is given but nothing turns on mixed precision, so no operator would be cast. "
                "Accepted: use_torch_autocast: true (or bf16=True in the training arguments), or drop the list."
            )
        setattr(run, key, tuple(ops))
    if run.autocast_bf16_ops is not None and run.autocast_fp32_ops is not None:
        both = sorted(set(run.autocast_bf16_ops) & set(run.autocast_fp32_ops))
        if both:
            raise _refuse(
                f"gaudi_config: operator(s) {', '.join(both)} are in both autocast_bf16_ops and autocast_fp32_ops. "
                "Accepted: each operator in one list at most."
            )
    run.fused_clip_norm = bool(c["use_fused_clip_norm"])
    if deepspeed and (run.autocast_bf16_ops or run.autocast_fp32_ops):
        raise _refuse(
            "gaudi_config: autocast_bf16_ops / autocast_fp32_ops with deepspeed: DeepSpeed sets the precision from "
            "its own config (optimum-habana turns autocast off under DeepSpeed too). Drop the lists or deepspeed."
        )

    # Mode, compile, graphs.
    run.lazy_mode = bool(a["use_lazy_mode"]) and not a["torch_compile"]
    compile_only = [
        n for n in ("use_regional_compilation", "compile_from_sec_iteration", "use_compiled_autograd") if a[n]
    ] + [n for n in ("compile_dynamic", "cache_size_limit") if a[n] is not None]
    if a["torch_compile"]:
        run.compile = {
            "regions": bool(a["use_regional_compilation"]),
            "dynamic": a["compile_dynamic"],
            "from_step": 1 if a["compile_from_sec_iteration"] else 0,
            "compiled_autograd": bool(a["use_compiled_autograd"]),
        }
    elif compile_only:
        raise _refuse(
            f"training_args: {', '.join(compile_only)} set without torch_compile=True, so nothing would be compiled "
            "(optimum-habana reads them only when compiling). Accepted: torch_compile=True, or drop them."
        )
    stages: list[str] = []
    if a["use_hpu_graphs"] or a["use_hpu_graphs_for_inference"]:
        stages += ["validate", "test", "predict"]
    if a["use_hpu_graphs_for_training"]:
        stages.insert(0, "fit")
    if stages:
        if run.compile is not None:
            raise _refuse(
                "training_args: HPU graphs (use_hpu_graphs_*) with torch_compile=True: HPU graphs run in lazy mode and "
                "torch.compile in eager mode, so HPUGraphs and HPUCompile are not combined. Choose one."
            )
        if not run.lazy_mode:
            raise _refuse(
                "training_args: HPU graphs (use_hpu_graphs_*) with use_lazy_mode=False: HPU graphs need lazy mode "
                "(optimum-habana refuses this too). Accepted: use_lazy_mode=True."
            )
        run.graphs = {"stages": tuple(stages), "max_graphs": a["max_hpu_graphs"]}
    elif a["max_hpu_graphs"] is not None:
        raise _refuse(
            f"training_args: max_hpu_graphs={a['max_hpu_graphs']!r} without HPU graphs. Accepted: with "
            "use_hpu_graphs_for_training or use_hpu_graphs_for_inference (optimum-habana refuses it too)."
        )

    # Strategy.
    if deepspeed:
        from ._deepspeed import fill_from_arguments

        # "auto" values filled from the arguments, as transformers' HfTrainerDeepSpeedConfig does.
        run.strategy = ("deepspeed", {"config": fill_from_arguments(a["deepspeed"], a)})
        run.warmup = {"warmup_steps": a["warmup_steps"], "warmup_ratio": a["warmup_ratio"]}
    elif a["fsdp"] not in ("", [], None, False):
        options = a["fsdp"].split() if isinstance(a["fsdp"], str) else list(a["fsdp"])
        sharding = [o for o in options if o in _FSDP_SHARDING]
        other = [o for o in options if o not in _FSDP_SHARDING and o not in ("offload", "auto_wrap")]
        if other or len(sharding) > 1:
            raise _refuse(
                f"training_args: fsdp={a['fsdp']!r}: {', '.join(map(repr, other)) or 'several sharding options'} "
                f"not accepted. Accepted: one of {', '.join(_FSDP_SHARDING)}, optionally with 'offload' and "
                "'auto_wrap'."
            )
        arguments: dict[str, Any] = {"sharding_strategy": _FSDP_SHARDING[sharding[0] if sharding else "full_shard"]}
        if "offload" in options:
            arguments["cpu_offload"] = True
        arguments.update(
            fsdp_strategy_arguments(
                options, a["fsdp_config"], a["fsdp_min_num_params"], a["fsdp_transformer_layer_cls_to_wrap"]
            )
        )
        if "activation_checkpointing_policy" in arguments:
            # The recomputed forward would append its keys and values to the KV cache the first one filled.
            run.model_setup["no_kv_cache"] = "fsdp_config activation_checkpointing"
        run.strategy = ("fsdp", arguments)
    else:
        ddp: dict[str, Any] = {
            "find_unused_parameters": bool(a["ddp_find_unused_parameters"]),
            "bucket_cap_mb": a["ddp_bucket_cap_mb"],
            "timeout": timedelta(seconds=a["ddp_timeout"]),
        }
        if a["ddp_broadcast_buffers"] is not None:
            ddp["broadcast_buffers"] = bool(a["ddp_broadcast_buffers"])
        run.strategy = ("ddp", ddp)
    _distribution(run, a, deepspeed)

    # Trainer loop settings.
    trainer = run.trainer
    if a["output_dir"]:
        trainer["default_root_dir"] = str(a["output_dir"])
    trainer["accumulate_grad_batches"] = int(a["gradient_accumulation_steps"])
    clip = a["max_grad_norm"]
    trainer["gradient_clip_val"] = float(clip) if clip else None
    if clip:
        trainer["gradient_clip_algorithm"] = "norm"
    if a["max_steps"] is not None and a["max_steps"] > 0:
        trainer["max_steps"] = int(a["max_steps"])
        trainer["max_epochs"] = -1
    else:
        epochs = a["num_train_epochs"]
        if float(epochs) != int(epochs):
            raise _refuse(
                f"training_args: num_train_epochs={epochs!r} is not a whole number; Lightning's max_epochs is. "
                "Accepted: a whole number of epochs, or max_steps."
            )
        trainer["max_epochs"] = int(epochs)
    trainer.update(_evaluation(a))
    run.validate_in_fit = a["eval_strategy"] not in ("no", None)
    if a["logging_strategy"] == "epoch":
        raise _refuse(
            "training_args: logging_strategy='epoch': Lightning logs per step (log_every_n_steps) and per epoch where "
            "the module logs with self.log(..., on_epoch=True). Accepted: 'steps' or 'no'."
        )
    steps = a["logging_steps"]
    if isinstance(steps, float) and steps < 1:
        raise _refuse(f"training_args: logging_steps={steps!r} (a ratio) is not accepted: give whole steps.")
    trainer["log_every_n_steps"] = int(steps)
    if a["disable_tqdm"] is not None:
        trainer["enable_progress_bar"] = not a["disable_tqdm"]
    if a["full_determinism"]:
        trainer["deterministic"] = True
    run.logger = _logger(a)
    run.checkpoint = _checkpoint(a)
    run.load_best = _load_best(a, run.checkpoint)
    run.seed = a["seed"]

    # Optimizer, scheduler, data, model, profiler.
    if a["optim"] not in _OPTIMIZERS:
        raise _refuse(
            f"training_args: optim={a['optim']!r} is not supported. Accepted: {', '.join(_OPTIMIZERS)}; for another "
            "optimizer write configure_optimizers yourself."
        )
    name = _OPTIMIZERS[a["optim"]]
    if c["use_fused_adam"] and name != "adamw":
        raise _refuse(f"gaudi_config: use_fused_adam=True with optim={a['optim']!r}: the fused kernel is AdamW's.")
    run.optimizer = {
        "name": name,
        "lr": float(a["learning_rate"]),
        "betas": (float(a["adam_beta1"]), float(a["adam_beta2"])),
        "eps": float(a["adam_epsilon"]),
        "weight_decay": float(a["weight_decay"]),
        "fused": bool(c["use_fused_adam"]),
    }
    run.scheduler = {
        "name": a["lr_scheduler_type"],
        "warmup_steps": int(a["warmup_steps"]),
        "warmup_ratio": float(a["warmup_ratio"]),
        "kwargs": _scheduler_kwargs(a["lr_scheduler_type"], a["lr_scheduler_kwargs"], run.optimizer["lr"]),
    }
    for split, size, alias in (
        ("train", "per_device_train_batch_size", "per_gpu_train_batch_size"),
        ("eval", "per_device_eval_batch_size", "per_gpu_eval_batch_size"),
    ):
        loader: dict[str, Any] = {
            "batch_size": int(a[alias] or a[size]),
            "num_workers": int(a["dataloader_num_workers"]),
            "drop_last": bool(a["dataloader_drop_last"]),
            "pin_memory": bool(a["dataloader_pin_memory"]),
        }
        if loader["num_workers"] > 0:
            loader["persistent_workers"] = bool(a["dataloader_persistent_workers"])
            if a["dataloader_prefetch_factor"] is not None:
                loader["prefetch_factor"] = int(a["dataloader_prefetch_factor"])
        run.dataloaders[split] = loader
    _model(run, a)
    if a["profiling_steps"]:
        run.profiler = {
            "warmup": int(a["profiling_warmup_steps"]),
            "active": int(a["profiling_steps"]),
            "record_shapes": bool(a["profiling_record_shapes"]),
            "with_stack": bool(a["profiling_with_stack"]),
        }
    elif a["profiling_warmup_steps"] or a["profiling_with_stack"]:
        raise _refuse(
            "training_args: profiling_warmup_steps / profiling_with_stack without profiling_steps > 0: nothing would "
            "be profiled. Accepted: profiling_steps above 0, or drop them."
        )
    run.tokens_per_second = bool(a["include_tokens_per_second"])
    _knobs(run, a)
    return run


def _knobs(run: OptimumImport, a: Mapping[str, Any]) -> None:
    dynamo = {
        n: a[n]
        for n in ("cache_size_limit", "inline_inbuilt_nn_modules", "allow_unspec_int_on_nn_module")
        if a[n] is not None
    }
    if dynamo:
        from lightning_accel.habana.dynamo_settings import DynamoSettings

        try:
            DynamoSettings(**dynamo)
        except ConfigurationError as exc:
            raise _refuse(f"training_args: {exc}") from None
        run.dynamo = dynamo
    if a["pipelining_fwd_bwd"]:
        if not run.lazy_mode:
            raise _refuse(
                "training_args: pipelining_fwd_bwd=True with use_lazy_mode=False or torch_compile=True: it adds a "
                "lazy-mode graph boundary between forward and backward, and eager mode has no lazy graphs "
                "(optimum-habana skips it there without a word). Accepted: use_lazy_mode=True without torch_compile, "
                "or drop the field."
            )
        run.pipelining = True
    run.adjust_throughput = bool(a["adjust_throughput"])
    warmup = a["throughput_warmup_steps"]
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise _refuse(
            f"training_args: throughput_warmup_steps={warmup!r} is not accepted. Accepted: an int >= 0, the optimizer "
            "steps left out of the throughput (0: none)."
        )
    if warmup and run.adjust_throughput:
        raise _refuse(
            "training_args: throughput_warmup_steps with adjust_throughput=True is not supported yet (issue 46): "
            "AdjustedThroughputMonitor has no warm-up, and ThroughputAfterWarmup counts validation and checkpoint "
            "time, so neither figure would be optimum-habana's. Drop one of them."
        )
    run.throughput_warmup_batches = warmup * int(a["gradient_accumulation_steps"])
    run.sdp_on_bf16 = bool(a["sdp_on_bf16"])


def _distribution(run: OptimumImport, a: Mapping[str, Any], deepspeed: bool) -> None:
    _context_parallel(run, a, deepspeed)
    kind = a["distribution_strategy"]
    if kind in ("ddp", None):
        return
    if kind != "fast_ddp":
        raise _refuse(
            f"training_args: distribution_strategy={kind!r} is not accepted. Accepted: 'ddp' (HPUParallelStrategy) "
            "or 'fast_ddp' (HPUFastDDPStrategy)."
        )
    if run.strategy[0] != "ddp":
        other = "deepspeed" if deepspeed else "fsdp"
        raise _refuse(
            f"training_args: distribution_strategy='fast_ddp' with {other}: fast_ddp averages whole gradients over "
            f"the ranks without a wrapper, and {other} shards them with its own. Choose one."
        )
    ddp_only = {
        "ddp_find_unused_parameters": a["ddp_find_unused_parameters"] not in (False, None),
        "ddp_bucket_cap_mb": a["ddp_bucket_cap_mb"] not in (230, None),
        "ddp_broadcast_buffers": a["ddp_broadcast_buffers"] is not None,
    }
    given = [name for name, set_ in ddp_only.items() if set_]
    if given:
        raise _refuse(
            f"training_args: {', '.join(given)} with distribution_strategy='fast_ddp': these steer DDP's reducer, "
            "which fast_ddp does not build (optimum-habana drops them there without a word). Drop them, or use "
            "distribution_strategy='ddp'."
        )
    # optimum-habana's trainer calls all_reduce_gradients(model, use_hpu_graphs=True) whatever its other settings;
    # HPU graphs exist in lazy mode only (SDK 1.24 refuses to create one in eager mode), so there they are left out,
    # and with HPU graphs for training too: packing graphs over the training graph's own gradient tensors would
    # double every gradient (HPUGraphs refuses the pair), so the packing then runs as ordinary operations.
    packing_graphs = run.lazy_mode and not a["use_hpu_graphs_for_training"]
    run.strategy = (
        "fast_ddp",
        {"timeout": run.strategy[1]["timeout"], "buffer_dtype": "bfloat16", "use_hpu_graphs": packing_graphs},
    )


def _context_parallel(run: OptimumImport, a: Mapping[str, Any], deepspeed: bool) -> None:
    size = a["context_parallel_size"]
    if size in (1, None):
        return
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise _refuse(
            f"training_args: context_parallel_size={size!r} is not accepted. Accepted: an int >= 1 (1: none), "
            "dividing the number of HPUs."
        )
    if run.strategy[0] != "ddp" or a["distribution_strategy"] not in ("ddp", None):
        other = (
            "deepspeed" if deepspeed else "fsdp" if run.strategy[0] == "fsdp" else "distribution_strategy='fast_ddp'"
        )
        raise _refuse(
            f"training_args: context_parallel_size={size} with {other} is not supported yet (issue 46): context "
            "parallelism runs on DDP (HPUContextParallelStrategy). Drop one of them."
        )
    if a["torch_compile"]:
        raise _refuse(
            f"training_args: context_parallel_size={size} with torch_compile=True is not supported: context "
            "parallelism runs in eager and lazy mode only (under torch.compile transformers gives attention an "
            "explicit causal mask, which the split cannot offset). Drop one of them."
        )
    if a["flash_attention_fp8"]:
        raise _refuse(
            f"training_args: context_parallel_size={size} with flash_attention_fp8=True is not supported yet (issue "
            "46): the split attends over the group's keys and values on FusedSDPA (attn_implementation="
            "'gaudi_fused_sdpa') or torch's SDPA, not on the fp8 FusedAttention layers. Drop one of them."
        )
    run.strategy = ("context_parallel", {**run.strategy[1], "context_parallel_size": size})


def _evaluation(a: Mapping[str, Any]) -> dict[str, Any]:
    strategy = a["eval_strategy"]
    if strategy in ("no", None):
        return {}
    if strategy == "epoch":
        return {"check_val_every_n_epoch": 1}
    if strategy == "steps":
        steps = a["eval_steps"] or a["logging_steps"]
        if isinstance(steps, float) and steps < 1:
            raise _refuse(
                f"training_args: eval_steps={steps!r} is a ratio of the total steps, which Lightning has no form for. "
                "Accepted: a whole number of steps."
            )
        return {"val_check_interval": int(steps), "check_val_every_n_epoch": None}
    raise _refuse(f"training_args: eval_strategy={strategy!r} is not accepted. Accepted: 'no', 'steps', 'epoch'.")


def _logger(a: Mapping[str, Any]) -> Any:
    report = a["report_to"]
    if a["logging_strategy"] == "no" or report in _OFF_LOGGER:
        return "off"
    if report in _NO_LOGGER:
        return "default"
    if report in ("tensorboard", ["tensorboard"]):
        return ("tensorboard", str(a["logging_dir"] or a["output_dir"] or "lightning_logs"))
    raise _refuse(
        f"training_args: report_to={report!r} is not accepted by the importer. Accepted: 'none', 'tensorboard', "
        "'all' or unset (Lightning's default logger); for another integration drop the field and pass its Lightning "
        "logger (WandbLogger, MLFlowLogger, ...) to the Trainer."
    )


def _checkpoint(a: Mapping[str, Any]) -> dict[str, Any] | None:
    strategy = a["save_strategy"]
    if strategy in ("no", None):
        return None
    settings: dict[str, Any] = {"save_weights_only": bool(a["save_only_model"])}
    if a["output_dir"]:
        settings["dirpath"] = str(a["output_dir"])
    if strategy == "steps":
        settings["every_n_train_steps"] = int(a["save_steps"])
    elif strategy == "epoch":
        settings["every_n_epochs"] = 1
    else:
        raise _refuse(
            f"training_args: save_strategy={strategy!r} is not supported yet ({ISSUE}). Accepted: 'no', 'steps', "
            "'epoch' (with metric_for_best_model to keep the best)."
        )
    # transformers' default metric when the best model is loaded at the end: the evaluation loss.
    metric = a["metric_for_best_model"] or ("eval_loss" if a["load_best_model_at_end"] else None)
    limit = a["save_total_limit"]
    if metric:
        greater = a["greater_is_better"]
        if greater is None:
            greater = not str(metric).endswith("loss")
        settings.update(monitor=str(metric), mode="max" if greater else "min", save_top_k=limit or 1)
        # transformers ranks a checkpoint by the evaluation of the same step. A step-triggered ModelCheckpoint would
        # rank it by the evaluation before (Lightning validates after the batch's callbacks): save after each
        # evaluation instead, ModelCheckpoint's own way with a monitored metric.
        settings.pop("every_n_train_steps", None)
        settings["every_n_epochs"] = 1
    elif limit:
        settings.update(monitor="step", mode="max", save_top_k=int(limit))
    else:
        settings["save_top_k"] = -1
    return settings


def _load_best(a: Mapping[str, Any], checkpoint: dict[str, Any] | None) -> bool:
    """``load_best_model_at_end``, refused where transformers refuses it (its checkpoint monitors the metric)."""
    if not a["load_best_model_at_end"]:
        return False
    save, evaluate = a["save_strategy"], a["eval_strategy"]
    # transformers' own checks (TrainingArguments.__post_init__): the best is chosen among the saved evaluations.
    if checkpoint is None or save != evaluate:
        raise _refuse(
            f"training_args: load_best_model_at_end=True with save_strategy={save!r} and eval_strategy={evaluate!r}: "
            "the best model is chosen among checkpoints saved when the model was evaluated. Accepted: save_strategy "
            "and eval_strategy both 'steps' or both 'epoch'."
        )
    eval_steps = a["eval_steps"] or a["logging_steps"]
    if save == "steps" and int(a["save_steps"]) % int(eval_steps):
        raise _refuse(
            f"training_args: load_best_model_at_end=True with save_steps={a['save_steps']!r} not a multiple of "
            f"eval_steps={eval_steps!r}: a checkpoint would be saved without an evaluation to rank it. Accepted: "
            "save_steps a round multiple of eval_steps."
        )
    return True


def _scheduler_kwargs(kind: Any, given: Any, lr: float) -> dict[str, Any]:
    """The scheduler's arguments, refused here when transformers' ``get_scheduler`` would refuse them at the run."""
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise _refuse(
            f"training_args: lr_scheduler_kwargs={given!r} is not accepted. Accepted: a dict of the scheduler's "
            "keyword arguments (e.g. {'num_cycles': 2} for 'cosine_with_restarts')."
        )
    kwargs = dict(given)
    if kind in _SCHEDULERS and not kwargs:
        return kwargs
    if kind in _METRIC_SCHEDULERS:
        raise _refuse(
            f"training_args: lr_scheduler_type={kind!r} steps on an evaluation metric, which the Hugging Face Trainer "
            "feeds it itself. In Lightning return torch.optim.lr_scheduler.ReduceLROnPlateau from configure_optimizers "
            "with 'monitor': 'eval_loss' (or your metric) in its lr_scheduler dict."
        )
    try:
        import torch
        from transformers import get_scheduler
    except ImportError:
        raise _refuse(
            f"training_args: lr_scheduler_type={kind!r} with lr_scheduler_kwargs={kwargs!r} is built by transformers' "
            "get_scheduler, as the Hugging Face Trainer builds it, and transformers is not installed. Install "
            f"transformers, or use one of {', '.join(_SCHEDULERS)} without lr_scheduler_kwargs."
        ) from None
    probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    try:
        get_scheduler(kind, probe, num_warmup_steps=1, num_training_steps=10, scheduler_specific_kwargs=kwargs)
    except (TypeError, ValueError) as exc:
        raise _refuse(
            f"training_args: lr_scheduler_type={kind!r} with lr_scheduler_kwargs={kwargs!r}: transformers' "
            f"get_scheduler refuses them: {exc}. Accepted: a transformers SchedulerType and the keyword arguments of "
            "its schedule function (transformers.optimization)."
        ) from exc
    return kwargs


def _check_fp8_attention(a: Mapping[str, Any]) -> None:
    # optimum-habana swaps in fp8 attention only when it converts the model for fp8, and the SDK's fp8 attention
    # trains only causal, non-recompute calls: anything else would do nothing, or fail at the first step on a Gaudi.
    wrong = [
        f"{name}={a[name]!r} (needs {need!r})"
        for name, need in (
            ("fp8", True),
            ("attn_implementation", "gaudi_fused_sdpa"),
            ("flash_attention_causal_mask", True),
            ("flash_attention_recompute", False),
        )
        if a[name] != need
    ]
    if wrong:
        raise _refuse(
            f"training_args: flash_attention_fp8=True with {', '.join(wrong)}: fp8 attention runs only when the model "
            "trains in fp8 (optimum-habana ignores it otherwise), through FusedSDPA's fp8 kernel, and the SDK trains "
            "it causally (the mask dropped) and without recompute. Accepted: fp8=True, attn_implementation="
            "'gaudi_fused_sdpa', flash_attention_causal_mask=True, flash_attention_recompute=False; or drop "
            "flash_attention_fp8."
        )


def _model(run: OptimumImport, a: Mapping[str, Any]) -> None:
    attention = a["attn_implementation"]
    flash = {
        n: a[n] for n in ("flash_attention_recompute", "flash_attention_fast_softmax", "flash_attention_causal_mask")
    }
    softmax_mode = "fast" if flash["flash_attention_fast_softmax"] else "None"
    if a["flash_attention_fp8"]:
        _check_fp8_attention(a)
        run.model_kwargs["attn_implementation"] = "sdpa"
        run.model_setup["fp8_fused_attention"] = {"softmax_mode": softmax_mode}
    elif attention == "gaudi_fused_sdpa":
        run.model_kwargs["attn_implementation"] = "sdpa"
        run.model_setup["fused_sdpa"] = {
            "recompute": bool(flash["flash_attention_recompute"]),
            "causal": bool(flash["flash_attention_causal_mask"]),
            "softmax_mode": softmax_mode,
        }
    elif attention in ("eager", "sdpa", None):
        run.model_kwargs["attn_implementation"] = attention or "eager"
        if any(flash.values()):
            raise _refuse(
                f"training_args: {', '.join(n for n, v in flash.items() if v)} need "
                "attn_implementation='gaudi_fused_sdpa' (FusedSDPA); with "
                f"{attention!r} nothing would use them."
            )
    else:
        raise _refuse(
            f"training_args: attn_implementation={attention!r} is not accepted. Accepted: 'eager', 'sdpa', "
            "'gaudi_fused_sdpa'."
        )
    if a["gradient_checkpointing"]:
        run.model_setup["gradient_checkpointing"] = a["gradient_checkpointing_kwargs"]
    if run.precision == "fp8":
        run.model_setup["fp8"] = True
    if a["minimize_memory"]:
        if run.precision != "fp8":
            raise _refuse(
                "training_args: minimize_memory=True without fp8=True: it steers the SDK's fp8 Linear layers only "
                "(optimum-habana ignores it then, without a word). Accepted: fp8=True, or drop the field."
            )
        run.model_setup["fp8_minimize_memory"] = True
    if a["use_zero3_leaf_promotion"]:
        config = run.strategy[1].get("config") if run.strategy[0] == "deepspeed" else None
        stage = (config or {}).get("zero_optimization", {}).get("stage")
        if stage != 3:
            raise _refuse(
                "training_args: use_zero3_leaf_promotion=True without a DeepSpeed ZeRO stage 3 config (deepspeed with "
                f"zero_optimization.stage 3; found {'no deepspeed' if config is None else f'stage {stage!r}'}): leaf "
                "modules are a ZeRO-3 setting, so nothing would use it. Accepted: a ZeRO-3 deepspeed config, or drop "
                "the field."
            )
        run.model_setup["zero3_leaf_promotion"] = True
