"""The arguments of the HPU precision plugins, checked once and shared by the Trainer and Fabric plugins."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
from torch.utils._pytree import tree_map

from lightning_accel.core.errors import ConfigurationError

from . import _fp8, _fp8_inference, sdk
from ._op_lists import read_operator_list
from .plugin import TRANSFORMER_ENGINE_HINT

__all__ = [
    "PRECISIONS",
    "HPUPrecisionHooks",
    "PrecisionLiteral",
    "PrecisionSettings",
    "convert_floats",
    "default_dtype",
    "from_lightning_plugin",
    "normalize_precision",
]

PrecisionLiteral = Literal["bf16-mixed", "16-mixed", "32-true", "bf16-true", "fp8"]
PRECISIONS: tuple[str, ...] = ("bf16-mixed", "16-mixed", "32-true", "bf16-true", "fp8")
# Lightning's short spellings, mapped as Lightning maps them (precision=16 is "16-mixed").
_ALIASES: dict[Any, str] = {16: "16-mixed", "16": "16-mixed", "bf16": "bf16-mixed", 32: "32-true", "32": "32-true"}
_ACCEPTED = (
    "'bf16-mixed', '16-mixed', '32-true', 'bf16-true', 'fp8' (Gaudi2 and later; or Lightning's 16, '16', 'bf16', 32, "
    "'32')"
)
# Lightning's connectors build these from precision=...; they know nothing of HPUs, so the strategies translate them.
_GENERIC = ("Precision", "MixedPrecision", "HalfPrecision", "DoublePrecision")

_Plugin = TypeVar("_Plugin")


def normalize_precision(precision: Any) -> str:
    """The canonical precision string for ``precision``.

    Raises:
        ConfigurationError: When HPUs do not support ``precision``.
    """
    value = _ALIASES.get(precision, precision)
    if value not in PRECISIONS:
        raise ConfigurationError(
            f"precision={precision!r} is not supported on HPUs. Accepted: {_ACCEPTED}.{_hint(value)}"
        )
    return str(value)


def _hint(value: Any) -> str:
    """What to use instead of a precision HPUs do not take."""
    if value == "16-true":
        return (
            " The HPU plugins keep float16 for mixed precision only: '16-mixed' computes in float16 with float32 "
            "weights, and 'bf16-true' gives 16-bit weights (bfloat16)."
        )
    if isinstance(value, str) and value.startswith("transformer-engine"):
        return " " + TRANSFORMER_ENGINE_HINT
    if value in (64, "64", "64-true"):
        return " Gaudi has no float64: the SDK computes float64 in float32."
    return ""


@dataclass(frozen=True)
class PrecisionSettings:
    """Checked precision arguments.

    Attributes:
        precision: One of :data:`PRECISIONS`.
        opt_level: ``"O1"`` (the SDK's autocast has no other level).
        verbose: ``False`` (the SDK's autocast does not report its decisions).
        lower_ops: Operators run in the lower dtype (``None``: the list the SDK loaded).
        fp32_ops: Operators run in float32 (``None``: the list the SDK loaded).
    """

    precision: str
    opt_level: str
    verbose: bool
    lower_ops: frozenset[str] | None
    fp32_ops: frozenset[str] | None

    @classmethod
    def create(
        cls,
        precision: Any,
        opt_level: str,
        verbose: bool,
        bf16_file_path: str | Path | None,
        fp32_file_path: str | Path | None,
    ) -> PrecisionSettings:
        """Check the plugin arguments, read the operator lists and hand them to the SDK (before it loads).

        Raises:
            ConfigurationError: For an unsupported precision, ``opt_level`` or ``verbose``, lists given without a
                mixed precision, a bad list file, an operator in both lists, or lists that cannot reach the SDK (it
                has loaded with other lists: the message gives the ``export`` lines to set before start).
        """
        value = normalize_precision(precision)
        if opt_level != "O1":
            raise ConfigurationError(
                f"opt_level={opt_level!r} is not supported. Accepted: 'O1' (the default): HPU mixed precision is the "
                "SDK's torch.autocast(device_type='hpu'), which casts only the operators of its lists and has no other "
                "level (O2 was Habana Mixed Precision's, removed from the SDK). To run more operators in the lower "
                "precision, list their ATen names in bf16_file_path."
            )
        if verbose:
            raise ConfigurationError(
                f"verbose={verbose!r} is not supported. Accepted: verbose=False (the default): the SDK's "
                "torch.autocast(device_type='hpu') does not report its cast decisions. To see which dtype an operator "
                "ran in, look at the dtype of its output."
            )
        mixed = value.endswith("-mixed")
        if not mixed and (bf16_file_path is not None or fp32_file_path is not None):
            raise ConfigurationError(
                f"bf16_file_path / fp32_file_path were given with precision={precision!r}, which casts no operator. "
                "Operator lists need a mixed precision: pass precision='bf16-mixed' (or '16-mixed'), or drop the lists."
            )
        lower = None if bf16_file_path is None else read_operator_list(bf16_file_path, "bf16_file_path")
        fp32 = None if fp32_file_path is None else read_operator_list(fp32_file_path, "fp32_file_path")
        if lower is not None and fp32 is not None and lower & fp32:
            both = ", ".join(sorted(lower & fp32))
            raise ConfigurationError(
                f"Operator(s) {both} appear in both bf16_file_path={str(bf16_file_path)!r} and "
                f"fp32_file_path={str(fp32_file_path)!r}. Accepted: each operator in at most one list; remove it from "
                "the list whose precision you do not want."
            )
        # The SDK reads the lists once, when it loads: hand them over now, before anything loads it.
        sdk._export_autocast_lists(bf16_file_path, fp32_file_path)
        return cls(value, opt_level, False, lower, fp32)

    @property
    def mixed(self) -> bool:
        """Whether operations are cast per operator."""
        return self.precision.endswith("-mixed")

    @property
    def lower_dtype(self) -> torch.dtype:
        """The lower-precision dtype: float16 for ``"16-mixed"``, bfloat16 otherwise."""
        return torch.float16 if self.precision == "16-mixed" else torch.bfloat16

    @property
    def weight_dtype(self) -> torch.dtype:
        """The dtype of the weights: bfloat16 for ``"bf16-true"``, float32 otherwise."""
        return torch.bfloat16 if self.precision == "bf16-true" else torch.float32

    def cast_context(self) -> AbstractContextManager[Any]:
        """Per-operator casting for the mixed precisions; bfloat16 as the default dtype for ``"bf16-true"``."""
        if self.precision == "bf16-true":
            return default_dtype(torch.bfloat16)
        if not self.mixed:
            return nullcontext()
        return sdk.autocast(self.lower_dtype)

    def no_cast_context(self) -> AbstractContextManager[Any]:
        """No casting inside (the optimizer step); nothing to do for the true precisions."""
        return sdk.disable_casts() if self.mixed else nullcontext()


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Make ``dtype`` the default floating-point dtype inside the block."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def convert_floats(data: Any, dtype: torch.dtype) -> Any:
    """``data`` with every floating-point tensor converted to ``dtype`` (other values untouched)."""
    return tree_map(lambda v: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v, data)


class HPUPrecisionHooks:
    """Mixin: the precision hooks the Trainer and Fabric HPU plugins share, driven by their ``_settings``.

    Lightning-free, so that one copy serves both trees; the plugins add what differs (the optimizer step's signature,
    Fabric's ``convert_output``).
    """

    _settings: PrecisionSettings
    recipe: Any = None
    scaler: Any = None  # the loss scaler of "16-mixed" (loss_scaler)
    replace_layers: bool = False
    fp8_train_available: bool = False
    fp8_inference_available: bool = False
    _inference: _fp8_inference.InferenceRun

    def state_dict(self) -> dict[str, Any]:
        """The loss scaler's state (scale, growth tracker) with ``"16-mixed"``; empty otherwise."""
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the loss scaler's state with ``"16-mixed"``."""
        if self.scaler is not None and state_dict:
            self.scaler.load_state_dict(state_dict)

    def _init_fp8(self) -> None:
        # What lightning-habana 1.7's plugin reported: fp8 training where the device has fp8 (checked by the
        # settings), fp8 inference where Intel Neural Compressor is installed too.
        self.recipe = None
        self.replace_layers = False
        self.fp8_train_available = self._settings.precision == "fp8"
        self.fp8_inference_available = self.fp8_train_available and _fp8_inference.inc_available()
        self._inference = _fp8_inference.InferenceRun()

    @property
    def fp8_training_available(self) -> bool:
        """lightning-habana 1.7's name of :attr:`fp8_train_available`."""
        return self.fp8_train_available

    def teardown(self) -> None:
        """After a run (the Trainer's test or predict): write the fp8 measurements of a module being measured."""
        self._inference.finish()
        super().teardown()  # type: ignore[misc]

    def forward_context(self) -> AbstractContextManager[Any]:
        """Per-operator casting for the forward pass and the steps (bfloat16 default dtype for ``"bf16-true"``).

        With ``"fp8"``: the SDK's ``fp8_autocast(enabled=True, fp8_recipe=...)`` (the recipe given to
        :meth:`convert_modules`, else the SDK's ``DelayedScaling()``).
        """
        if self._settings.precision == "fp8":
            self._inference.check_ranks()
            return _fp8.fp8_autocast(_fp8.make_recipe(self.recipe))
        return self._settings.cast_context()

    def convert_modules(
        self,
        module: torch.nn.Module,
        inference: bool = False,
        replace_layers: bool = False,
        recipe: Any = None,
        quant: bool | str | os.PathLike[str] | Mapping[str, Any] = True,
        fp8_data_path: str | os.PathLike[str] | None = None,
    ) -> torch.nn.Module:
        """Prepare ``module`` for fp8 training or inference (lightning-habana 1.7's ``convert_modules``).

        Args:
            module: The model.
            inference: ``False``: fp8 training with the SDK's Transformer Engine. ``True``: fp8 inference through
                Intel Neural Compressor (the extra ``lightning-accel-habana[fp8-inference]``): measure with
                ``quant=False`` and ``trainer.test``/``predict`` on calibration data, then quantize with
                ``quant=True`` and test or predict in fp8.
            replace_layers: Training: swap each ``torch.nn.Linear`` for the SDK's ``transformer_engine.Linear``
                (weights copied). A model that already holds Transformer Engine layers is left as it is.
            recipe: Training: the scaling recipe for the steps (a ``transformer_engine.recipe.DelayedScaling``, a
                dict of its arguments, or ``None`` for the SDK's default).
            quant: Inference: ``True`` (quantize), ``False`` (measure), the path of an INC fp8 JSON config or a dict
                of one.
            fp8_data_path: Inference: the folder the measurements are written to and read from (under
                ``inc_output/``); ``$HABANA_LOGS`` when ``None``.

        Returns:
            ``module``, converted in place.

        Raises:
            ConfigurationError: When the precision is not ``"fp8"``, for a bad ``recipe`` or ``quant``, a missing
                config file, no folder for the measurements, quantization without measurements, Intel Neural
                Compressor missing, or arguments of one mode given for the other.
        """
        if inference:
            _fp8.check_inference_arguments(self._settings.precision, module, replace_layers, recipe)
            self._inference.convert(module, quant, fp8_data_path)
            return module
        self.recipe = _fp8.convert_modules(
            self._settings.precision, module, replace_layers, recipe, quant, fp8_data_path
        )
        self.replace_layers = bool(replace_layers)
        return module

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """bfloat16 weights for ``"bf16-true"``; the module unchanged otherwise."""
        return module.to(dtype=torch.bfloat16) if self._true_bf16 else module

    def tensor_init_context(self) -> AbstractContextManager[Any]:
        """Create floating-point tensors in bfloat16 for ``"bf16-true"``."""
        return default_dtype(torch.bfloat16) if self._true_bf16 else nullcontext()

    def module_init_context(self) -> AbstractContextManager[Any]:
        """Create module parameters in bfloat16 for ``"bf16-true"``."""
        return self.tensor_init_context()

    def convert_input(self, data: Any) -> Any:
        """Floating-point inputs in bfloat16 for ``"bf16-true"``; unchanged otherwise."""
        return convert_floats(data, torch.bfloat16) if self._true_bf16 else data

    @property
    def _true_bf16(self) -> bool:
        # Read from the plugin's own ``precision`` (as Lightning's plugins do), not the settings it was built with.
        return getattr(self, "precision", None) == "bf16-true"


def loss_scaler(precision: str, scaler: Any, sharded: bool = False) -> Any:
    """The loss scaler a plugin of ``precision`` uses: an ``HPUGradScaler`` for ``"16-mixed"``, none otherwise.

    With ``sharded=True`` (FSDP) it is an ``HPUShardedGradScaler``. A user's scaler gives its settings.

    Raises:
        ConfigurationError: For a scaler given with a precision that needs none, or one that is not a GradScaler.
    """
    from .grad_scaler import hpu_scaler_like

    if precision != "16-mixed":
        if scaler is not None:
            raise ConfigurationError(
                f"scaler={type(scaler).__name__} was given with precision={precision!r}, which does not scale the loss "
                "(bfloat16 has float32's range). Accepted: a scaler with precision='16-mixed' only; drop it here."
            )
        return None
    try:
        return hpu_scaler_like(scaler, sharded)
    except TypeError as error:
        raise ConfigurationError(str(error)) from None


def from_lightning_plugin(
    plugin: _Plugin,
    hpu_class: type[Any],
    create: Callable[[str], _Plugin],
    lightning_modules: tuple[str, ...],
) -> _Plugin:
    """The HPU plugin for a precision plugin a strategy was given (the HPU plugins' ``from_lightning``).

    An HPU plugin and a user's own plugin are kept; Lightning's generic plugins, built from ``precision=``, become
    ``create(precision)``; Lightning's device-specific plugins are refused.

    Args:
        plugin: The plugin given.
        hpu_class: The HPU plugin class of the tree (named in the error message).
        create: Builds the HPU plugin from a canonical precision string.
        lightning_modules: Module prefixes of the tree's Lightning packages (e.g. ``("lightning.",
            "pytorch_lightning.")``).

    Raises:
        ConfigurationError: For a Lightning plugin that cannot run on HPUs.
    """
    if isinstance(plugin, hpu_class):
        return plugin
    if type(plugin).__name__ in _GENERIC:
        precision = normalize_precision(getattr(plugin, "precision", "32-true"))
        hpu_plugin = create(precision)
        # Lightning's MixedPrecision for "16-mixed" carries a GradScaler (the user's, or one Lightning built): its
        # settings carry over to the HPU plugin's scaler instead of being dropped.
        given = getattr(plugin, "scaler", None)
        if precision == "16-mixed" and given is not None and getattr(hpu_plugin, "scaler", None) is not None:
            hpu_plugin.scaler = loss_scaler(precision, given)  # type: ignore[attr-defined]
        return hpu_plugin
    # A user's own subclass is their business; Lightning's device-specific plugins are not.
    if type(plugin).__module__.startswith(lightning_modules):
        raise ConfigurationError(
            f"The precision plugin {type(plugin).__name__} cannot run on HPUs. Accepted: precision='bf16-mixed', "
            f"'16-mixed', '32-true' or 'bf16-true', or plugins=[{hpu_class.__name__}(...)]."
        )
    return plugin
