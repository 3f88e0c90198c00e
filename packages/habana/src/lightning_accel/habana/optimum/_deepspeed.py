"""A Hugging Face DeepSpeed config's ``"auto"`` values, filled from the training arguments.

The Hugging Face Trainer fills a DeepSpeed config's ``"auto"`` values from its training arguments and checks that
the values given match them (transformers' ``HfTrainerDeepSpeedConfig``, ``integrations/deepspeed.py``):
``trainer_config_process`` when the arguments are built, ``trainer_config_finalize`` once the model and the number
of training steps are known. :func:`fill_from_arguments` does the first part when the arguments are imported;
:class:`DeepSpeedAutoFill` the second, from the LightningModule's model config and the Trainer's step count, before
the DeepSpeed engine is built. Lightning sets ``gradient_accumulation_steps`` itself (from the Trainer's
``accumulate_grad_batches``, which the import sets from the same argument) and refuses the key in the config, so the
import takes it out once it matches; DeepSpeed computes an ``"auto"`` ``train_batch_size`` itself (micro batch x
accumulation x world size, what the Hugging Face Trainer writes there), so that key goes too.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_accel.core.errors import ConfigurationError

__all__ = ["HIDDEN_SIZE_KEYS", "DeepSpeedAutoFill", "fill_from_arguments", "pending_auto_keys"]

AUTO = "auto"
HIDDEN_SIZE_KEYS = (
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
)
_STEP_KEYS = ("scheduler.params.total_num_steps", "scheduler.params.warmup_num_steps")


def _node(config: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    *path, last = key.split(".")
    node: Any = config
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return None, last
    return (node if isinstance(node, dict) else None), last


def _get(config: dict[str, Any], key: str) -> Any:
    node, last = _node(config, key)
    return None if node is None else node.get(last)


def _is_zero3(config: dict[str, Any]) -> bool:
    return _get(config, "zero_optimization.stage") == 3


class _Filler:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.mismatches: list[str] = []

    def fill(self, key: str, value: Any, argument: str | None = None) -> None:
        """An ``"auto"`` value becomes ``value``; with ``argument``, another given value must equal it."""
        node, last = _node(self.config, key)
        if node is None or last not in node:
            return
        if node[last] == AUTO:
            node[last] = value
        elif argument is not None and node[last] != value:
            self.mismatches.append(f"{key}={node[last]!r} but {argument}={value!r}")


def load(source: Any) -> dict[str, Any]:
    """The DeepSpeed config of the ``deepspeed`` field (a dict, or the path of a JSON file), as a copy."""
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    path = Path(str(source))
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(
            f"training_args: deepspeed={str(source)!r}: no such file. Accepted: the path of a DeepSpeed JSON config "
            "or a dict."
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigurationError(
            f"training_args: deepspeed={str(source)!r} cannot be read as JSON ({exc}). Accepted: a DeepSpeed JSON "
            "config."
        ) from exc
    if not isinstance(loaded, dict):
        raise ConfigurationError(
            f"training_args: deepspeed={str(source)!r} holds no JSON object: not a DeepSpeed config."
        )
    return loaded


def fill_from_arguments(source: Any, a: Mapping[str, Any]) -> dict[str, Any]:
    """The DeepSpeed config with the ``"auto"`` values the training arguments decide filled in, as transformers does.

    Args:
        source: The ``deepspeed`` field: a dict or the path of a JSON file (not changed).
        a: Every training argument (defaults included).

    Raises:
        ConfigurationError: For a value given in the config that differs from the training argument it must match
            (the Hugging Face Trainer refuses these too), or a config that cannot be read.
    """
    config = load(source)
    filler = _Filler(config)
    micro = int(a["per_gpu_train_batch_size"] or a["per_device_train_batch_size"])
    accumulation = int(a["gradient_accumulation_steps"])
    filler.fill("train_micro_batch_size_per_gpu", micro, "per_device_train_batch_size")
    filler.fill("gradient_accumulation_steps", accumulation, "gradient_accumulation_steps")
    filler.fill("gradient_clipping", a["max_grad_norm"], "max_grad_norm")
    filler.fill("optimizer.params.lr", a["learning_rate"], "learning_rate")
    filler.fill("optimizer.params.betas", [a["adam_beta1"], a["adam_beta2"]], "adam_beta1+adam_beta2")
    filler.fill("optimizer.params.eps", a["adam_epsilon"], "adam_epsilon")
    filler.fill("optimizer.params.weight_decay", a["weight_decay"], "weight_decay")
    filler.fill("scheduler.params.warmup_min_lr", 0)
    filler.fill("scheduler.params.warmup_max_lr", a["learning_rate"], "learning_rate")
    filler.fill("fp16.enabled", bool(a["fp16"] or a["fp16_full_eval"]), "fp16|fp16_full_eval")
    filler.fill("bf16.enabled", bool(a["bf16"] or a["bf16_full_eval"]), "bf16|bf16_full_eval")
    max_steps = a["max_steps"]
    if max_steps is not None and max_steps > 0:
        fill_steps(filler, int(max_steps), a)
    if filler.mismatches:
        raise ConfigurationError(
            "training_args: the DeepSpeed config and the training arguments disagree (the Hugging Face Trainer "
            "refuses this too):\n  " + "\n  ".join(filler.mismatches) + '\nSet these keys to "auto", or make them '
            "equal to the arguments."
        )
    # Lightning sets this key from Trainer(accumulate_grad_batches), which the import sets from the same argument,
    # and refuses it in the config.
    config.pop("gradient_accumulation_steps", None)
    if config.get("train_batch_size") == AUTO:
        # DeepSpeed computes it as micro batch x accumulation x world size, the value transformers writes there.
        del config["train_batch_size"]
    return config


def fill_steps(filler: _Filler, total: int, a: Mapping[str, Any]) -> None:
    """The scheduler's step counts, from the number of optimizer steps (transformers' ``trainer_config_finalize``)."""
    warmup = int(a["warmup_steps"]) or math.ceil(float(a["warmup_ratio"]) * total)
    filler.fill("scheduler.params.total_num_steps", total, "num_training_steps (calculated)")
    filler.fill("scheduler.params.warmup_num_steps", max(1, warmup), "warmup_steps")


def pending_auto_keys(config: dict[str, Any]) -> list[str]:
    """The ``"auto"`` keys left for the model and the Trainer to decide (model width, step counts)."""
    return [key for key in (*HIDDEN_SIZE_KEYS, *_STEP_KEYS) if _get(config, key) == AUTO]


def _hidden_size(module: Any) -> int | None:
    for sub in module.modules():
        config = getattr(sub, "config", None)
        for candidate in (config, getattr(config, "text_config", None)):
            if candidate is None:
                continue
            if isinstance(getattr(candidate, "hidden_size", None), int):
                return int(candidate.hidden_size)
            sizes = getattr(candidate, "hidden_sizes", None)
            if sizes:
                return int(max(sizes))
    return None


class DeepSpeedAutoFill:
    """Fill the ``"auto"`` keys that need the model or the step count, before the DeepSpeed engine is built.

    A Lightning callback: its ``setup`` runs before the strategy builds the engine. The model's width comes from the
    first module of the LightningModule with a transformers ``config`` (``hidden_size``, or the largest of
    ``hidden_sizes``; also under ``text_config``); the step count from ``Trainer.estimated_stepping_batches``.

    Args:
        arguments: Every training argument (defaults included).
    """

    def __new__(cls, arguments: Mapping[str, Any]) -> Any:
        from lightning.pytorch import Callback

        class DeepSpeedAutoFill(Callback):
            def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
                config = getattr(trainer.strategy, "config", None)
                if stage != "fit" or not isinstance(config, dict):
                    return
                filler = _Filler(config)
                pending = pending_auto_keys(config)
                width_keys = [k for k in pending if k in HIDDEN_SIZE_KEYS]
                if width_keys:
                    width = _hidden_size(pl_module)
                    if width is None:
                        raise ConfigurationError(
                            f'DeepSpeed config: {", ".join(width_keys)} are "auto", which the model\'s width decides '
                            f"(hidden_size), but no module of {type(pl_module).__name__} has a transformers config "
                            'with hidden_size or hidden_sizes. Replace "auto" with numbers.'
                        )
                    filler.fill("zero_optimization.reduce_bucket_size", width * width)
                    if _is_zero3(config):
                        filler.fill("zero_optimization.stage3_prefetch_bucket_size", int(0.9 * width * width))
                        filler.fill("zero_optimization.stage3_param_persistence_threshold", 10 * width)
                if any(k in _STEP_KEYS for k in pending):
                    fill_steps(filler, int(trainer.estimated_stepping_batches), arguments)

        return DeepSpeedAutoFill()
