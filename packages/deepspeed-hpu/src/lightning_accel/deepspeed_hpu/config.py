"""Reading and checking DeepSpeed configs, with errors that say what is wrong and how to fix it.

Lightning's ``DeepSpeedStrategy`` builds a DeepSpeed config from its arguments, or takes the user's config and then
ignores those arguments. Here a config and an argument that contradict each other are an error instead of a silent
choice, and problems DeepSpeed would only report from deep inside ``deepspeed.initialize`` are found up front.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_accel.core.errors import ConfigurationError

from .optimizers import check_config_optimizer

__all__ = [
    "ARGUMENT_DEFAULTS",
    "CONFIG_PATH_VAR",
    "STAGES",
    "check_against_arguments",
    "check_arguments",
    "check_batch_size",
    "check_nvme_offload",
    "check_strategy_config",
    "check_precision",
    "explicit_arguments",
    "load_config",
    "validate_stage",
    "zero_stage",
]

CONFIG_PATH_VAR = "PL_DEEPSPEED_CONFIG_PATH"
STAGES = (0, 1, 2, 3)

# Strategy arguments that only shape the config Lightning builds, with the config key each one becomes.
_ZERO_ARGUMENTS = {
    "stage": "zero_optimization.stage",
    "offload_optimizer": "zero_optimization.offload_optimizer",
    "offload_parameters": "zero_optimization.offload_param",
    "offload_optimizer_device": "zero_optimization.offload_optimizer.device",
    "offload_params_device": "zero_optimization.offload_param.device",
    "nvme_path": "zero_optimization.offload_*.nvme_path",
    "cpu_checkpointing": "activation_checkpointing.cpu_checkpointing",
    "partition_activations": "activation_checkpointing.partition_activations",
    "contiguous_memory_optimization": "activation_checkpointing.contiguous_memory_optimization",
    "synchronize_checkpoint_boundary": "activation_checkpointing.synchronize_checkpoint_boundary",
    "logging_batch_size_per_gpu": "train_micro_batch_size_per_gpu",
    "zero_optimization": "zero_optimization",
}


# Defaults of the strategy arguments that only shape the config Lightning builds (Trainer and Fabric alike).
ARGUMENT_DEFAULTS: Mapping[str, Any] = {
    "zero_optimization": True,
    "stage": 2,
    "offload_optimizer": False,
    "offload_parameters": False,
    "offload_params_device": "cpu",
    "offload_optimizer_device": "cpu",
    "nvme_path": "/local_nvme",
    "cpu_checkpointing": False,
    "partition_activations": False,
    "contiguous_memory_optimization": False,
    "synchronize_checkpoint_boundary": False,
    "logging_batch_size_per_gpu": "auto",
}


def explicit_arguments(given: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of ``given`` (named as in :data:`ARGUMENT_DEFAULTS`) that differ from their defaults."""
    return {name: value for name, value in given.items() if value != ARGUMENT_DEFAULTS[name]}


def validate_stage(stage: Any, source: str = "stage") -> int:
    """Return ``stage`` when it is a ZeRO stage (0 to 3).

    Raises:
        ConfigurationError: Otherwise, naming where the value came from.
    """
    if isinstance(stage, bool) or not isinstance(stage, int) or stage not in STAGES:
        raise ConfigurationError(
            f"{source}={stage!r} is not a ZeRO stage. Accepted: 0 (off), 1 (optimizer state partitioned), 2 (+ "
            "gradients), 3 (+ parameters). Pick one of these, e.g. strategy='hpu_deepspeed_stage_2'."
        )
    return stage


_OFFLOAD_DEVICES = ("cpu", "nvme")


def validate_offload_device(device: Any, argument: str) -> None:
    """Refuse an offload device DeepSpeed does not have (it knows ``"cpu"`` and ``"nvme"``).

    Raises:
        ConfigurationError: Naming ``argument``, the value and the accepted devices.
    """
    if device not in _OFFLOAD_DEVICES:
        raise ConfigurationError(
            f"{argument}={device!r} is not an offload device. Accepted: 'cpu' (host memory) or 'nvme' (with "
            "nvme_path=...). Fix: pass one of these; the HPU itself is where nothing is offloaded."
        )


def check_arguments(given: Mapping[str, Any]) -> dict[str, Any]:
    """Check a strategy's ZeRO arguments before Lightning builds anything; return those changed from their defaults.

    The Trainer's and Fabric's ``HPUDeepSpeedStrategy`` both call it first thing, and hand what it returns to
    :func:`check_strategy_config` once Lightning has loaded or built the config.

    Args:
        given: The strategy's arguments, named as in :data:`ARGUMENT_DEFAULTS`.

    Raises:
        ConfigurationError: For a ``stage`` that is not a ZeRO stage, or an ``offload_optimizer_device`` /
            ``offload_params_device`` DeepSpeed does not have.
    """
    validate_stage(given["stage"])
    validate_offload_device(given["offload_optimizer_device"], "offload_optimizer_device")
    validate_offload_device(given["offload_params_device"], "offload_params_device")
    return explicit_arguments(given)


def load_config(config: str | os.PathLike[str] | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The user's config: a dict, a JSON file path, or the file named by ``PL_DEEPSPEED_CONFIG_PATH``; else ``None``.

    Raises:
        ConfigurationError: When the path does not exist, cannot be read, is not JSON, or holds no JSON object.
    """
    source = "config"
    if config is None and os.environ.get(CONFIG_PATH_VAR):
        config, source = os.environ[CONFIG_PATH_VAR], CONFIG_PATH_VAR
    if config is None:
        return None
    if isinstance(config, Mapping):
        loaded: Any = dict(config)
    elif isinstance(config, (str, os.PathLike)):
        loaded = _read_json(Path(config), source)
    else:
        raise ConfigurationError(
            f"{source}={config!r} ({type(config).__name__}) is not a DeepSpeed config. Accepted: a dict, or the path "
            "of a JSON file (str or pathlib.Path)."
        )
    if not isinstance(loaded, dict):
        raise ConfigurationError(
            f"{source}={config!r} holds a JSON {type(loaded).__name__}, but a DeepSpeed config is a JSON object "
            '({"zero_optimization": {...}, ...}). Fix the file.'
        )
    zero = loaded.get("zero_optimization")
    if isinstance(zero, Mapping) and "stage" in zero:
        validate_stage(zero["stage"], f"{source}['zero_optimization']['stage']")
    return loaded


def _read_json(path: Path, source: str) -> Any:
    if not path.is_file():
        what = "a directory, not a file" if Path(path).is_dir() else "no such file"
        raise ConfigurationError(
            f"{source}={str(path)!r}: {what}. Accepted: the path of an existing DeepSpeed JSON config, or a dict."
            " Check the path (relative paths start at the working directory, now "
            f"{os.getcwd()!r})."
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"{source}={str(path)!r} cannot be read ({type(exc).__name__}: {exc}). Make the file readable UTF-8 JSON, "
            "or pass the config as a dict."
        ) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"{source}={str(path)!r} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}. Fix the "
            "file (DeepSpeed configs are JSON objects), or pass the config as a dict."
        ) from exc


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def check_against_arguments(config: Mapping[str, Any], explicit: Mapping[str, Any]) -> None:
    """Refuse strategy arguments that were changed from their defaults and differ from the config that was given.

    Lightning builds the config from these arguments only when no config is passed; with a config they would be
    ignored silently, which is never what the caller meant.

    Raises:
        ConfigurationError: Naming the argument, its value, what the config says, and the fix.
    """
    for name, value in explicit.items():
        key = _ZERO_ARGUMENTS.get(name)
        if key is None:
            continue
        in_config = _lookup(config, key) if "*" not in key else None
        if in_config is not None and in_config == value:
            continue  # both say the same (strategy="hpu_deepspeed_stage_3" with a config file of stage 3)
        said = f"the config has {key}={in_config!r}" if in_config is not None else f"the config does not set {key}"
        raise ConfigurationError(
            f"{name}={value!r} conflicts with the DeepSpeed config that was given: {said}. When a config is given it "
            f"decides every ZeRO setting. Fix: set {key} in the config and drop {name}=, or drop the config."
        )


def check_strategy_config(config: Mapping[str, Any], explicit: Mapping[str, Any], user_config: bool) -> None:
    """Check the config a strategy ended up with (Trainer's and Fabric's alike), before any process starts.

    Args:
        config: The config Lightning loaded, or built from the arguments.
        explicit: The arguments changed from their defaults, as :func:`check_arguments` returned them.
        user_config: Whether the config was given (a dict, a path, ``PL_DEEPSPEED_CONFIG_PATH``): only then can it
            contradict ``explicit``.

    Raises:
        ConfigurationError: From :func:`check_against_arguments`, :func:`check_nvme_offload` and
            :func:`~lightning_accel.deepspeed_hpu.optimizers.check_config_optimizer`, in that order.
    """
    if user_config:
        check_against_arguments(config, explicit)
    check_nvme_offload(config)
    check_config_optimizer(config)


def zero_stage(config: Mapping[str, Any]) -> int:
    """The ZeRO stage a config asks for (0 when it has no ``zero_optimization``)."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, Mapping):
        return 0
    return int(zero.get("stage", 0))


def _enabled(config: Mapping[str, Any], key: str) -> bool:
    section = config.get(key)
    return isinstance(section, Mapping) and bool(section.get("enabled", False))


def check_precision(config: Mapping[str, Any], precision: str, fp16_supported: bool) -> None:
    """Refuse a config whose ``bf16`` / ``fp16`` section contradicts the precision plugin, and unsupported fp16.

    Raises:
        ConfigurationError: Naming both settings and how to make them agree.
    """
    for key, family in (("bf16", "bf16"), ("fp16", "16")):
        if _enabled(config, key) and not precision.startswith(f"{family}-"):
            raise ConfigurationError(
                f"The DeepSpeed config enables {key} ({key}.enabled=true) but precision={precision!r}. Accepted: "
                f"precision='{family}-mixed' (or '{family}-true') with this config, or {key}.enabled=false. Make them "
                "agree: Trainer(precision=...) or HPUDeepSpeedPrecisionPlugin(precision=...)."
            )
    if precision.startswith("16-") and not fp16_supported:
        raise ConfigurationError(
            f"precision={precision!r} needs float16 support, which this device does not have (DeepSpeed's accelerator "
            "reports is_fp16_supported()=False). Accepted here: 'bf16-mixed', 'bf16-true', '32-true'."
        )


def check_batch_size(config: Mapping[str, Any], world_size: int) -> None:
    """Check ``train_batch_size`` = micro batch x accumulation x world size before DeepSpeed asserts it.

    Raises:
        ConfigurationError: Naming the three numbers and the value that would fit.
    """
    if "train_batch_size" not in config:
        return
    micro = int(config.get("train_micro_batch_size_per_gpu", 1))
    accumulation = int(config.get("gradient_accumulation_steps", 1))
    expected = micro * accumulation * world_size
    if int(config["train_batch_size"]) != expected:
        raise ConfigurationError(
            f"config['train_batch_size']={config['train_batch_size']!r} must equal train_micro_batch_size_per_gpu "
            f"({micro}) x accumulate_grad_batches ({accumulation}) x devices*num_nodes ({world_size}) = {expected}. "
            f"Fix: set it to {expected}, or remove it from the config (DeepSpeed then computes it)."
        )


def check_nvme_offload(config: Mapping[str, Any]) -> None:
    """Check that offloading to NVMe can work here: a writable ``nvme_path`` and DeepSpeed's ``async_io`` op.

    DeepSpeed swaps tensors to NVMe through its ``async_io`` op, which the accelerator's ``AsyncIOBuilder`` builds. The
    HPU accelerator has none, in upstream DeepSpeed (0.19: ``op_builder/hpu/`` holds ``builder``, ``cpu_adam``,
    ``fp_quantizer``, ``fused_adam``, ``no_impl`` and ``transformer_inference``) and in Intel's DeepSpeed for Gaudi
    (HabanaAI/DeepSpeed tag 1.21.0, the same six modules), so ``create_op_builder("AsyncIOBuilder")`` gives ``None``
    and NVMe offload is refused on Gaudi with the reason. A DeepSpeed that ships such a builder is asked whether it
    can build the op here.

    Raises:
        ConfigurationError: Saying what is missing and how to get it, or to offload to CPU instead.
    """
    zero = config.get("zero_optimization")
    if not isinstance(zero, Mapping):
        return
    sections = [
        (name, section)
        for name in ("offload_optimizer", "offload_param")
        if isinstance(section := zero.get(name), Mapping) and section.get("device") == "nvme"
    ]
    if not sections:
        return
    for name, section in sections:
        path = section.get("nvme_path")
        if not path or not os.path.isdir(path) or not os.access(path, os.W_OK):
            raise ConfigurationError(
                f"zero_optimization.{name}.nvme_path={path!r} is not a writable directory, so DeepSpeed cannot swap "
                "tensors there. Fix: HPUDeepSpeedStrategy(nvme_path='/path/on/a/fast/local/disk') (or set it in the "
                "config), or offload to CPU: strategy='hpu_deepspeed_stage_3_offload'."
            )
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    builder = accelerator.create_op_builder("AsyncIOBuilder")
    if builder is None:
        raise ConfigurationError(
            "Offloading to NVMe (zero_optimization.offload_*.device='nvme') needs DeepSpeed's async_io op, and "
            f"DeepSpeed {deepspeed.__version__}'s {type(accelerator).__name__} has no AsyncIOBuilder to build it: "
            "no DeepSpeed has one for HPUs (neither upstream DeepSpeed nor Intel's DeepSpeed for Gaudi), so no "
            "library or package installed here makes NVMe offload work. Fix: offload to CPU: "
            "strategy='hpu_deepspeed_stage_3_offload' (or zero_optimization.offload_*.device='cpu')."
        )
    if not builder.is_compatible(verbose=False):
        raise ConfigurationError(
            "Offloading to NVMe (zero_optimization.offload_*.device='nvme') needs DeepSpeed's async_io op, which "
            f"{type(accelerator).__name__}'s AsyncIOBuilder cannot build here (DeepSpeed's builder needs the libaio "
            "headers and library; `python -m deepspeed.env_report` says what is missing). Fix: install them (e.g. "
            "`apt-get install libaio-dev`), or offload to CPU: strategy='hpu_deepspeed_stage_3_offload'."
        )
