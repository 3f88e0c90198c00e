"""optimum-habana's FSDP arguments (``fsdp``, ``fsdp_config`` and the deprecated top-level fields) as HPUFSDPStrategy's.

optimum-habana 1.21 reads them in ``GaudiTrainingArguments.__post_init__`` (``training_args.py:726-843``) and hands
them to accelerate's FSDP plugin as environment variables: the sharding strategy and ``offload`` from ``fsdp``; with
``auto_wrap``, a wrap policy by transformer layer class names (``transformer_layer_cls_to_wrap``; without names,
accelerate takes the model's ``_no_split_modules``) or by size (``min_num_params``); and, from ``fsdp_config``,
``backward_prefetch`` (default ``"NO_PREFETCH"``), ``forward_prefetch`` (false), ``sync_module_states`` (true),
``use_orig_params`` (true) and ``activation_checkpointing`` (false; accelerate then checkpoints the wrapped units).
The keys may carry an ``fsdp_`` prefix, which is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

__all__ = ["WrapLayersNamed", "WrapLargerThan", "fsdp_strategy_arguments"]

# optimum-habana's defaults for the keys it reads (training_args.py:766-843); the XLA keys must stay off.
_DEFAULTS: dict[str, Any] = {
    "min_num_params": 0,
    "transformer_layer_cls_to_wrap": None,
    "backward_prefetch": "NO_PREFETCH",
    "forward_prefetch": False,
    "sync_module_states": True,
    "cpu_ram_efficient_loading": False,
    "use_orig_params": True,
    "activation_checkpointing": False,
    "xla": False,
    "xla_fsdp_v2": False,
    "xla_fsdp_grad_ckpt": False,
}


class WrapLayersNamed:
    """A torch FSDP wrap policy: every module whose class is named in ``names`` becomes an FSDP unit.

    optimum-habana's configs name optimum-habana's own classes (``GaudiLlamaDecoderLayer``), which patch transformers'
    (``LlamaDecoderLayer``): a name matches a class of that name with or without the ``Gaudi`` prefix. Without names,
    the classes of the model's ``_no_split_modules`` (transformers' decoder layers), as accelerate takes them.

    Args:
        names: Class names, or ``None`` for the model's ``_no_split_modules``.

    Raises:
        ConfigurationError: When the model (the first module the policy sees) has no module of those classes.

    Example:
        >>> import torch
        >>> policy = WrapLayersNamed(("Linear",))
        >>> policy(module=torch.nn.Sequential(torch.nn.Linear(2, 2)), recurse=True, nonwrapped_numel=6)
        True
    """

    def __init__(self, names: tuple[str, ...] | None) -> None:
        self.names = names
        self._classes: frozenset[str] | None = None

    def _resolve(self, root: torch.nn.Module) -> frozenset[str]:
        found = {type(m).__name__ for m in root.modules()}
        names = self.names
        if names is None:
            names = tuple(n for m in root.modules() for n in (getattr(m, "_no_split_modules", None) or ()))
            if not names:
                raise ConfigurationError(
                    "training_args: fsdp 'auto_wrap' without transformer_layer_cls_to_wrap takes the model's "
                    f"_no_split_modules (as accelerate does), and {type(root).__name__} has none. Accepted: "
                    "fsdp_config transformer_layer_cls_to_wrap naming the layer class to shard as a unit (e.g. "
                    "'LlamaDecoderLayer')."
                )
        wanted = {n for name in names for n in (name, name.removeprefix("Gaudi"))}
        matched = frozenset(wanted & found)
        if not matched:
            raise ConfigurationError(
                f"training_args: fsdp_config transformer_layer_cls_to_wrap={list(names)!r} names no layer of "
                f"{type(root).__name__} (its classes include {', '.join(sorted(found)[:12])}). Accepted: the class "
                "name of the model's repeated block, e.g. 'LlamaDecoderLayer' (optimum-habana's "
                "'GaudiLlamaDecoderLayer' matches it too)."
            )
        return matched

    def __call__(self, module: torch.nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
        """The wrap-policy protocol of torch's FSDP: descend everywhere; wrap a module of a named class."""
        if self._classes is None:
            self._classes = self._resolve(module)  # the root comes first
        return recurse or type(module).__name__ in self._classes


class WrapLargerThan:
    """A torch FSDP wrap policy by size (accelerate's ``SIZE_BASED_WRAP``, torch's ``size_based_auto_wrap_policy``).

    Args:
        min_num_params: A module holding at least this many parameters not yet wrapped becomes an FSDP unit.

    Example:
        >>> import torch
        >>> WrapLargerThan(100)(module=torch.nn.Linear(2, 2), recurse=False, nonwrapped_numel=6)
        False
    """

    def __init__(self, min_num_params: int) -> None:
        self.min_num_params = min_num_params

    def __call__(self, module: torch.nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
        """Wrap (or descend into) a module at least ``min_num_params`` large; never one without a forward."""
        large = nonwrapped_numel >= self.min_num_params
        if recurse:
            return large
        # A container (ModuleList, ModuleDict) is never called, so an FSDP unit made of it would never gather: only a
        # class that defines a forward below torch.nn.Module's placeholder is wrapped.
        classes = type(module).__mro__
        below_module = classes[: classes.index(torch.nn.Module)] if torch.nn.Module in classes else classes
        return large and any("forward" in vars(cls) for cls in below_module)


def _read_config(given: Any) -> dict[str, Any]:
    if given in (None, ""):
        return {}
    if isinstance(given, (str, Path)):
        try:
            given = json.loads(Path(given).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigurationError(
                f"training_args: fsdp_config={str(given)!r} is not a readable JSON file ({exc}). Accepted: a dict or "
                "the path of one."
            ) from exc
    if not isinstance(given, Mapping):
        raise ConfigurationError(
            f"training_args: fsdp_config={given!r} is not accepted. Accepted: a dict, or the path of a JSON file of "
            "one."
        )
    config = {(k[5:] if k.startswith("fsdp_") else k): v for k, v in given.items()}
    unknown = sorted(set(config) - set(_DEFAULTS))
    if unknown:
        raise ConfigurationError(
            f"training_args: fsdp_config keys {', '.join(map(repr, unknown))} are not read by optimum-habana 1.21. "
            f"Accepted keys (an 'fsdp_' prefix is dropped): {', '.join(_DEFAULTS)}."
        )
    return config


def _flag(config: Mapping[str, Any], key: str) -> bool:
    # optimum-habana reads these through str(value).lower() == "true".
    return str(config.get(key, _DEFAULTS[key])).lower() == "true"


def fsdp_strategy_arguments(
    options: list[str], given_config: Any, min_num_params: int, layer_cls: str | None
) -> dict[str, Any]:
    """HPUFSDPStrategy's keyword arguments beyond the sharding strategy and offload, from optimum-habana's fields.

    Raises:
        ConfigurationError: For what optimum-habana refuses, ignores without a word, or what is not supported here.
    """
    config = _read_config(given_config)
    if any(_flag(config, key) for key in ("xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt")):
        raise ConfigurationError(
            "training_args: fsdp_config: the XLA keys are for TPUs; Gaudi's FSDP is torch's. Drop them."
        )
    minimum = max(int(config.get("min_num_params") or 0), int(min_num_params or 0))
    names = config.get("transformer_layer_cls_to_wrap")
    names = [names] if isinstance(names, str) else list(names or [])
    if layer_cls:
        names.append(layer_cls)
    if minimum > 0 and names:
        raise ConfigurationError(
            "training_args: fsdp min_num_params and transformer_layer_cls_to_wrap are mutually exclusive (as in "
            "optimum-habana). Give one of them."
        )
    auto_wrap = "auto_wrap" in options
    if (minimum > 0 or names) and not auto_wrap:
        raise ConfigurationError(
            "training_args: fsdp min_num_params / transformer_layer_cls_to_wrap without 'auto_wrap' in fsdp: "
            "optimum-habana then wraps nothing by them, without a word. Accepted: add 'auto_wrap' (e.g. "
            "fsdp='full_shard auto_wrap')."
        )
    prefetch = str(config.get("backward_prefetch", _DEFAULTS["backward_prefetch"])).upper()
    if prefetch not in ("NO_PREFETCH", "BACKWARD_PRE"):
        raise ConfigurationError(
            f"training_args: fsdp_config backward_prefetch={config['backward_prefetch']!r} is not supported yet. "
            "Accepted: 'NO_PREFETCH' (optimum-habana's default) or 'BACKWARD_PRE'."
        )
    if _flag(config, "cpu_ram_efficient_loading"):
        raise ConfigurationError(
            "training_args: fsdp_config cpu_ram_efficient_loading=true steers how transformers' from_pretrained "
            "loads the weights (on rank 0 only), which your LightningModule does itself. Drop it; "
            "sync_module_states (on by default) still broadcasts rank 0's weights."
        )
    arguments: dict[str, Any] = {
        "forward_prefetch": _flag(config, "forward_prefetch"),
        "sync_module_states": _flag(config, "sync_module_states"),
        "use_orig_params": _flag(config, "use_orig_params"),
    }
    if prefetch == "NO_PREFETCH":
        arguments["backward_prefetch"] = None  # torch's default is BACKWARD_PRE, optimum-habana's none
    policy: Any = None
    if auto_wrap:
        policy = WrapLargerThan(minimum) if minimum > 0 else WrapLayersNamed(tuple(names) if names else None)
        arguments["auto_wrap_policy"] = policy
    if _flag(config, "activation_checkpointing"):
        if policy is None:
            raise ConfigurationError(
                "training_args: fsdp_config activation_checkpointing=true without 'auto_wrap' in fsdp: accelerate "
                "checkpoints the wrapped units, and there would be none. Accepted: add 'auto_wrap' to fsdp."
            )
        arguments["activation_checkpointing_policy"] = policy
    return arguments
