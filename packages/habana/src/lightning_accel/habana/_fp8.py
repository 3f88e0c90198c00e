"""fp8 training with the SDK's Transformer Engine, shared by the Trainer, Fabric and DeepSpeed precision plugins.

What the plugins do with ``precision="fp8"`` (the archived lightning-habana 1.6.0's ``plugins/precision.py``, kept
where it was right): ``convert_modules(module, replace_layers=True)`` swaps every ``torch.nn.Linear`` for the SDK's
``transformer_engine.Linear`` (copying the weights, which lightning-habana did not), unless the module already holds
Transformer Engine layers; the steps run inside ``fp8_autocast(enabled=True, fp8_recipe=recipe)``.

Only names the SDK has are used (gaudi-pytorch-bridge 1.18.0, ``hpex/experimental/transformer_engine/``; from 1.19 the
package re-exports ``intel_transformer_engine``):

- availability: every Gaudi the supported SDKs (1.23, 1.24) run on, Gaudi 2 and Gaudi 3, has fp8; the SDK refuses
  fp8 on first-generation Gaudi only, which those SDKs no longer run on. So the plugins ask nothing before the run
  (the SDK's own ``FP8GlobalStateManager.is_fp8_available()`` asks ``hpu.get_device_name()``, which acquires a
  device before the strategy has set ``HLS_MODULE_ID``), and ``fp8_autocast(enabled=True)`` still asserts the SDK's
  answer when the steps run, on the device the strategy chose;
- Transformer Engine layers are recognised as instances of the layer classes the package exports (``Linear``,
  ``FusedAttention`` and any other ``torch.nn.Module`` class of it or its ``module`` submodule), not by the module
  name of their class, which is ``intel_transformer_engine...`` from 1.19 on.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = [
    "check_inference_arguments",
    "convert_modules",
    "fp8_autocast",
    "make_recipe",
    "replace_linear_layers",
    "te_layer_classes",
]


def make_recipe(recipe: Any) -> Any:
    """The SDK's ``DelayedScaling`` for ``recipe``: itself, one built from a mapping, or the default (``None``).

    The class itself stands for its default, as lightning-habana 1.7 accepted it.

    Raises:
        ConfigurationError: For anything else, or a mapping the SDK's ``DelayedScaling`` refuses.
    """
    recipes = sdk.transformer_engine_module().recipe
    if recipe is None:
        return recipes.DelayedScaling()
    if isinstance(recipe, recipes.DelayedScaling):
        return recipe
    if recipe is recipes.DelayedScaling:
        return recipes.DelayedScaling()
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


def te_layer_classes() -> tuple[type[torch.nn.Module], ...]:
    """The Transformer Engine's layers: ``torch.nn.Module`` classes of the package, ``module``, ``module.base``."""
    te = sdk.transformer_engine_module()
    namespaces = [vars(te)]
    # The layers' package and the module of their common base (TransformerEngineBaseModule), where they exist.
    submodule = getattr(te, "module", None)
    for namespace in (submodule, getattr(submodule, "base", None)):
        if isinstance(namespace, ModuleType):
            namespaces.append(vars(namespace))
    found = {
        value
        for namespace in namespaces
        for value in namespace.values()
        # torch's own classes, should the package re-export one, are not Transformer Engine layers.
        if isinstance(value, type) and issubclass(value, torch.nn.Module) and value.__module__.split(".")[0] != "torch"
    }
    return tuple(sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}"))


def _has_te_layers(module: torch.nn.Module) -> bool:
    # FusedAttention holds no weights: a model given fp8 attention first still has its Linear layers to convert.
    attention = getattr(sdk.transformer_engine_module(), "FusedAttention", ())
    layers = te_layer_classes()
    return any(isinstance(m, layers) and not isinstance(m, attention) for m in module.modules())


def replace_linear_layers(module: torch.nn.Module) -> int:
    """Swap each ``torch.nn.Linear`` inside ``module`` for the SDK's ``transformer_engine.Linear`` with its weights.

    A module that already holds Transformer Engine layers is left as it is (the user converted it).

    Returns:
        How many layers were replaced.
    """
    te = sdk.transformer_engine_module()
    if _has_te_layers(module):
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


def _check_precision_and_module(precision: str, module: Any) -> None:
    if precision != "fp8":
        raise ConfigurationError(
            f"convert_modules() prepares a model for fp8, but this plugin's precision is "
            f"{precision!r}. Accepted: a plugin built with precision='fp8' (Gaudi2 and later)."
        )
    if not isinstance(module, torch.nn.Module):
        raise ConfigurationError(
            f"convert_modules(module={module!r}): accepted: a torch.nn.Module (your LightningModule or its model)."
        )


def check_inference_arguments(precision: str, module: Any, replace_layers: bool, recipe: Any) -> None:
    """Check the arguments of ``convert_modules(inference=True)`` that are not INC's.

    Raises:
        ConfigurationError: When ``precision`` is not ``"fp8"``, ``module`` is no module or has no submodules, or
            training-only arguments (``replace_layers``, ``recipe``) are given.
    """
    _check_precision_and_module(precision, module)
    if next(module.children(), None) is None:
        # INC replaces each quantizable layer inside its parent module; a model that is one layer has no parent.
        raise ConfigurationError(
            f"convert_modules(module={module!r}, inference=True): Intel Neural Compressor swaps the layers inside a "
            "model for fp8 ones and cannot swap the model itself. Accepted: a module holding the layers (your "
            "LightningModule, or e.g. torch.nn.Sequential(layer))."
        )
    if replace_layers or recipe is not None:
        raise ConfigurationError(
            f"convert_modules(inference=True, replace_layers={replace_layers!r}, recipe={recipe!r}): these arguments "
            "are for fp8 training (inference=False) with the Transformer Engine. Accepted for inference: quant and "
            "fp8_data_path (Intel Neural Compressor quantizes the model's own layers)."
        )


def convert_modules(
    precision: str,
    module: torch.nn.Module,
    replace_layers: bool,
    recipe: Any,
    quant: Any,
    fp8_data_path: Any,
) -> Any:
    """``convert_modules`` for fp8 training: check the arguments, swap the layers; returns the recipe for the steps.

    ``fp8_data_path`` is accepted and unused, as lightning-habana 1.7 accepted it with ``inference=False``.

    Raises:
        ConfigurationError: When ``precision`` is not ``"fp8"``, for a bad ``recipe``, or ``quant`` given for
            training.
    """
    _check_precision_and_module(precision, module)
    if quant is not True:
        raise ConfigurationError(
            f"convert_modules(quant={quant!r}): quant is for fp8 inference (inference=True) only. Accepted for "
            "training: leave it at its default."
        )
    made = make_recipe(recipe)
    if replace_layers:
        replace_linear_layers(module)
    return made
