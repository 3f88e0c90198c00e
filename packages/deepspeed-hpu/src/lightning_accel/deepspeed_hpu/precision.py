"""Precision for DeepSpeed on HPUs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from lightning.fabric.utilities.apply_func import apply_to_collection
from lightning.pytorch.plugins.precision import DeepSpeedPrecision
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import _fp8, _fp8_inference

__all__ = ["HPUDeepSpeedPrecisionPlugin", "PRECISIONS"]

# Aliases are the short forms the Trainer also accepts.
PRECISIONS = {
    "bf16-mixed": "bf16-mixed",
    "bf16": "bf16-mixed",
    "bf16-true": "bf16-true",
    "32-true": "32-true",
    "32": "32-true",
    "16-mixed": "16-mixed",
    "16": "16-mixed",
    "fp8": "fp8",
}


class HPUDeepSpeedPrecisionPlugin(DeepSpeedPrecision):
    """Precision plugin for :class:`~lightning_accel.deepspeed_hpu.HPUDeepSpeedStrategy`.

    ``"bf16-mixed"`` is DeepSpeed's bf16 mode: the engine keeps bf16 weights and runs in bf16, the optimizer keeps
    fp32 master weights; inputs are cast to bf16. ``"bf16-true"`` casts the module to bf16 up front. ``"32-true"`` is
    full precision. ``"16-mixed"`` is DeepSpeed's fp16 with loss scaling, accepted where the device supports float16
    (Gaudi2 and later; the strategy checks at set-up). ``"fp8"`` (Gaudi2 and later) runs DeepSpeed in float32 and the
    steps inside the SDK's Transformer Engine ``fp8_autocast``; :meth:`convert_modules` with ``replace_layers=True``
    swaps the model's ``torch.nn.Linear`` layers for ``transformer_engine.Linear`` (as
    :class:`~lightning_accel.habana.HPUPrecisionPlugin` does). Lightning's ``DeepSpeedPrecision`` given to the Trainer
    is turned into this plugin by the strategy.

    ``"fp8"`` inference through Intel Neural Compressor (the extra ``lightning-accel-habana[fp8-inference]``), as
    with :class:`~lightning_accel.habana.HPUPrecisionPlugin`: :meth:`convert_modules` with ``inference=True`` in the
    model's ``on_predict_start``, once DeepSpeed inference (``tensor_parallel``) has split the layers, so that INC
    patches DeepSpeed's ``LinearLayer`` / ``LinearAllreduce`` slices and each rank measures into and quantizes from
    its own files (``measure_hooks_maxabs_<rank>_<world size>.*``).

    For ``trainer.predict`` with DeepSpeed inference, inputs are cast to the inference ``dtype`` the model runs in.

    Args:
        precision: ``"bf16-mixed"``, ``"bf16-true"``, ``"32-true"``, ``"16-mixed"`` or ``"fp8"`` (``"bf16"``,
            ``"32"``, ``"16"`` as aliases).

    Raises:
        ConfigurationError: For any other value, or ``"fp8"`` where the SDK says fp8 is unavailable (its reason).

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.deepspeed_hpu import HPUDeepSpeedPrecisionPlugin, HPUDeepSpeedStrategy
        >>> plugin = HPUDeepSpeedPrecisionPlugin(precision="bf16-mixed")
        >>> trainer = Trainer(accelerator="hpu", devices=2, strategy=HPUDeepSpeedStrategy(stage=3),
        ...                   plugins=[plugin])  # doctest: +SKIP
    """

    def __init__(self, precision: str = "32-true") -> None:
        normalized = PRECISIONS.get(str(precision))
        if normalized is None:
            raise ConfigurationError(
                f"precision={precision!r} is not supported by DeepSpeed on HPU. Accepted: 'bf16-mixed', 'bf16-true', "
                "'32-true', '16-mixed' (where the device supports float16), 'fp8' (Gaudi2 and later), or the aliases "
                "'bf16', '32', '16'."
            )
        # fp8 runs DeepSpeed in float32 (no bf16/fp16 section): only the Transformer Engine layers compute in fp8.
        super().__init__("32-true" if normalized == "fp8" else normalized)  # type: ignore[arg-type]
        self.precision = normalized  # type: ignore[assignment]
        self._input_dtype: torch.dtype | None = None
        self.recipe: Any = None
        self.replace_layers = False
        self.fp8_train_available = normalized == "fp8"
        self.fp8_inference_available = self.fp8_train_available and _fp8_inference.inc_available()
        self._inference = _fp8_inference.InferenceRun()

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        """The SDK's ``fp8_autocast`` for ``"fp8"``; nothing otherwise (DeepSpeed casts)."""
        if self.precision == "fp8":
            self._inference.check_ranks()
            return _fp8.fp8_autocast(_fp8.make_recipe(self.recipe))
        return nullcontext()

    @override
    def teardown(self) -> None:
        """After ``trainer.predict``/``test``: write the fp8 measurements of a module being measured."""
        self._inference.finish()
        super().teardown()

    def convert_modules(
        self,
        module: torch.nn.Module,
        inference: bool = False,
        replace_layers: bool = False,
        recipe: Any = None,
        quant: bool | str | os.PathLike[str] | Mapping[str, Any] = True,
        fp8_data_path: str | os.PathLike[str] | None = None,
    ) -> torch.nn.Module:
        """Prepare ``module`` for fp8 training or inference (the arguments of ``HPUPrecisionPlugin.convert_modules``).

        Inference (``inference=True``) quantizes whole layers or DeepSpeed inference's tensor-parallel slices;
        ZeRO-3's partitioned parameters are refused (predict with DeepSpeed inference, ``tensor_parallel``, instead).

        Raises:
            ConfigurationError: When the precision is not ``"fp8"``, for a bad ``recipe`` or ``quant``, Intel Neural
                Compressor missing, a module whose parameters ZeRO-3 partitioned, or the arguments of one mode given
                for the other.
        """
        if inference:
            _fp8.check_inference_arguments(str(self.precision), module, replace_layers, recipe)
            _refuse_partitioned(module)
            self._inference.convert(module, quant, fp8_data_path)
            return module
        self.recipe = _fp8.convert_modules(str(self.precision), module, replace_layers, recipe, quant, fp8_data_path)
        self.replace_layers = bool(replace_layers)
        return module

    @classmethod
    def from_lightning(cls, plugin: DeepSpeedPrecision) -> HPUDeepSpeedPrecisionPlugin:
        """The HPU plugin with the same precision as Lightning's ``DeepSpeedPrecision``."""
        if isinstance(plugin, cls):
            return plugin
        return cls(plugin.precision)

    @property
    def dtype(self) -> torch.dtype:
        """The floating-point type the model computes in."""
        return self._desired_dtype

    def cast_inputs_to(self, dtype: torch.dtype | None) -> None:
        """Cast floating-point inputs to ``dtype`` (the inference engine's); ``None``: the precision's."""
        self._input_dtype = dtype

    @override
    def convert_input(self, data: Any) -> Any:
        """Cast floating-point tensors in ``data`` to the dtype the model runs in."""
        dtype = self._input_dtype or self._desired_dtype
        return apply_to_collection(data, torch.Tensor, _cast_floating, dtype)


def _refuse_partitioned(module: torch.nn.Module) -> None:
    # ZeRO-3 leaves each rank an empty placeholder per parameter (DeepSpeed marks them with ``ds_id``); INC would
    # measure and quantize those placeholders.
    partitioned = [name for name, parameter in module.named_parameters() if hasattr(parameter, "ds_id")]
    if partitioned:
        raise ConfigurationError(
            f"convert_modules(inference=True): the parameters of {type(module).__name__} are partitioned by ZeRO "
            f"stage 3 ({partitioned[0]!r} and {len(partitioned) - 1} more), so no rank holds a whole layer for Intel "
            "Neural Compressor to measure and quantize. Accepted: whole layers (ZeRO stages 0-2) or DeepSpeed "
            "inference's tensor-parallel slices: HPUDeepSpeedStrategy(tensor_parallel={'tp_size': N}) for "
            "trainer.predict."
        )


def _cast_floating(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return tensor.to(dtype) if torch.is_floating_point(tensor) else tensor
