"""fp8 training with the SDK's Transformer Engine, shared by the Trainer, Fabric and DeepSpeed precision plugins.

What the plugins do with ``precision="fp8"`` (the archived lightning-habana 1.6.0's ``plugins/precision.py``, kept
where it was right): the plugin is refused where the SDK says fp8 is unavailable, with the SDK's reason;
``convert_modules(module, replace_layers=True)`` swaps every ``torch.nn.Linear`` for the SDK's
``transformer_engine.Linear`` (copying the weights, which lightning-habana did not), unless the module already holds
Transformer Engine layers; the steps run inside ``fp8_autocast(enabled=True, fp8_recipe=recipe)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = [
    "TE_MODULE",
    "convert_modules",
    "fp8_autocast",
    "fp8_status",
    "make_recipe",
    "replace_linear_layers",
    "require_fp8",
]

# The SDK's module name: how lightning-habana recognised layers already converted by the user.
TE_MODULE = "habana_frameworks.torch.hpex.experimental.transformer_engine"


def fp8_status() -> tuple[bool, str]:
    """The SDK's answer to ``transformer_engine.fp8.is_fp8_available()``: ``(available, reason)``."""
    available, reason = sdk.transformer_engine_module().fp8.is_fp8_available()
    return bool(available), str(reason)


def require_fp8() -> None:
    """Raise unless the SDK says fp8 is available.

    Raises:
        ConfigurationError: With the SDK's reason.
    """
    available, reason = fp8_status()
    if not available:
        raise ConfigurationError(
            f"precision='fp8' is not available on this HPU ({sdk.hpu_module().get_device_name()}): the SDK says "
            f"{reason!r}. Accepted on it: 'bf16-mixed', 'bf16-true' or '32-true'."
        )


def make_recipe(recipe: Any) -> Any:
    """The SDK's ``DelayedScaling`` for ``recipe``: itself, one built from a mapping of its arguments, or the default.

    Raises:
        ConfigurationError: For anything else, or a mapping the SDK's ``DelayedScaling`` refuses.
    """
    recipes = sdk.transformer_engine_module().recipe
    if recipe is None:
        return recipes.DelayedScaling()
    if isinstance(recipe, recipes.DelayedScaling):
        return recipe
    if isinstance(recipe, Mapping):
        try:
            return recipes.DelayedScaling(**recipe)
        except (TypeError, ValueError, AssertionError) as exc:
            raise ConfigurationError(
                f"recipe={dict(recipe)!r} is not a valid DelayedScaling: {exc}. Accepted: the keyword arguments of "
                "transformer_engine.recipe.DelayedScaling (margin, interval, fp8_format=Format.E5M2 or "
                "Format.HYBRID, amax_history_len, amax_compute_algo='max' or 'most_recent', reduce_amax)."
            ) from exc
    raise ConfigurationError(
        f"recipe={recipe!r} is not an fp8 recipe. Accepted: None (the SDK's DelayedScaling()), a "
        "transformer_engine.recipe.DelayedScaling, or a dict of its keyword arguments."
    )


def fp8_autocast(recipe: Any) -> Any:
    """The SDK's ``fp8_autocast(enabled=True, fp8_recipe=recipe)``."""
    return sdk.transformer_engine_module().fp8_autocast(enabled=True, fp8_recipe=recipe)


def _has_te_layers(module: torch.nn.Module) -> bool:
    return any(type(m).__module__.startswith(TE_MODULE) or TE_MODULE in type(m).__module__ for m in module.modules())


def replace_linear_layers(module: torch.nn.Module) -> int:
    """Swap each ``torch.nn.Linear`` inside ``module`` for the SDK's ``transformer_engine.Linear`` with its weights.

    A module that already holds Transformer Engine layers is left as it is (the user converted it).

    Returns:
        How many layers were replaced.
    """
    te = sdk.transformer_engine_module()
    if _has_te_layers(module) or any(isinstance(m, te.Linear) for m in module.modules()):
        return 0
    replaced = 0
    for name, child in list(module.named_children()):
        if type(child) is torch.nn.Linear:
            layer = te.Linear(
                child.in_features,
                child.out_features,
                bias=child.bias is not None,
                params_dtype=child.weight.dtype,
                device=child.weight.device,
            )
            with torch.no_grad():
                layer.weight.copy_(child.weight)
                if child.bias is not None:
                    layer.bias.copy_(child.bias)
            layer.train(child.training)
            setattr(module, name, layer)
            replaced += 1
        else:
            replaced += replace_linear_layers(child)
    return replaced


def convert_modules(
    precision: str,
    module: torch.nn.Module,
    inference: bool,
    replace_layers: bool,
    recipe: Any,
    quant: bool,
    fp8_data_path: str | None,
) -> Any:
    """The plugins' ``convert_modules``: check the arguments, swap the layers; returns the recipe for the steps.

    Raises:
        ConfigurationError: When ``precision`` is not ``"fp8"``, for ``inference=True``, a bad ``recipe``, or
            inference-only arguments given for training.
    """
    if precision != "fp8":
        raise ConfigurationError(
            f"convert_modules() prepares a model for fp8, but this plugin's precision is "
            f"{precision!r}. Accepted: a plugin built with precision='fp8' (Gaudi2 and later)."
        )
    if not isinstance(module, torch.nn.Module):
        raise ConfigurationError(
            f"convert_modules(module={module!r}): accepted: a torch.nn.Module (your LightningModule or its model)."
        )
    if inference:
        raise ConfigurationError(
            "convert_modules(inference=True) is not supported: fp8 inference on Gaudi is Intel Neural Compressor's "
            "(neural_compressor.torch.quantization: prepare, measure, convert, configured by QUANT_CONFIG), whose "
            "fp8 modules call the SDK's fp8 kernels (torch.ops.hpu.cast_to_fp8_v2, fp8_gemm_v2, ...), and "
            "lightning-accel-habana does not drive it. Accepted: inference=False (fp8 training with "
            "replace_layers=True). For fp8 inference, run INC's prepare/convert on your model on a Gaudi2 or later "
            "(Intel Gaudi docs, 'Run Inference Using FP8') and predict with precision='bf16-mixed' or '32-true'."
        )
    if not quant or fp8_data_path is not None:
        raise ConfigurationError(
            f"convert_modules(quant={quant!r}, fp8_data_path={fp8_data_path!r}): these arguments are for fp8 "
            "inference (inference=True) only. Accepted for training: leave them at their defaults."
        )
    made = make_recipe(recipe)
    if replace_layers:
        replace_linear_layers(module)
    return made
