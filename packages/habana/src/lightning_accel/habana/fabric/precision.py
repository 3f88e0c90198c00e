"""The Fabric precision plugin for HPUs (the counterpart of :class:`~lightning_accel.habana.HPUPrecisionPlugin`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins import Precision
from typing_extensions import override

from .._precision_settings import (
    HPUPrecisionHooks,
    PrecisionSettings,
    convert_floats,
    from_lightning_plugin,
    loss_scaler,
)

__all__ = ["HPUPrecision"]


class HPUPrecision(HPUPrecisionHooks, Precision):
    """Mixed or true precision on HPUs for Fabric (``Fabric(accelerator="hpu", precision="bf16-mixed")`` picks it).

    The arguments and behaviour are those of :class:`~lightning_accel.habana.HPUPrecisionPlugin`: the SDK's
    ``torch.autocast(device_type="hpu")`` inside ``forward`` of modules set up by Fabric and inside
    ``fabric.autocast()``, switched off in the optimizer step. With ``"16-mixed"``, ``fabric.backward`` scales the loss
    and the optimizer step unscales, skips steps with inf or NaN gradients and updates the scale (``scaler``).

    Example:
        >>> from lightning.fabric import Fabric
        >>> from lightning_accel.habana.fabric import HPUPrecision
        >>> fabric = Fabric(accelerator="hpu", devices=1, plugins=[HPUPrecision("bf16-mixed")])  # doctest: +SKIP
    """

    def __init__(
        self,
        precision: str | int = "32-true",
        opt_level: str = "O1",
        verbose: bool = False,
        bf16_file_path: str | Path | None = None,
        fp32_file_path: str | Path | None = None,
        scaler: Any = None,
    ) -> None:
        self._settings = PrecisionSettings.create(precision, opt_level, verbose, bf16_file_path, fp32_file_path)
        self.precision = self._settings.precision  # type: ignore[assignment]
        self._init_fp8()
        self.opt_level = opt_level
        self.verbose = verbose
        self.scaler = loss_scaler(self.precision, scaler)

    @override
    def backward(self, tensor: torch.Tensor, model: Any, *args: Any, **kwargs: Any) -> None:
        """Backward, with the loss scaled for ``"16-mixed"``."""
        if self.scaler is not None:
            tensor = self.scaler.scale(tensor)
        super().backward(tensor, model, *args, **kwargs)

    @override
    def optimizer_step(self, optimizer: Any, **kwargs: Any) -> Any:
        """Run the optimizer step with casting switched off (through the loss scaler with ``"16-mixed"``)."""
        with self._settings.no_cast_context():
            if self.scaler is None:
                return super().optimizer_step(optimizer, **kwargs)
            step_output = self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        return step_output

    @override
    def unscale_gradients(self, optimizer: Any) -> None:
        """Unscale the gradients before clipping (``fabric.clip_gradients``) with ``"16-mixed"``."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    @override
    def convert_output(self, data: Any) -> Any:
        """Floating-point outputs back in the default dtype for ``"bf16-true"``."""
        return convert_floats(data, torch.get_default_dtype()) if self.precision == "bf16-true" else data

    @classmethod
    def from_lightning(cls, plugin: Precision) -> Precision:
        """The HPU plugin for a generic plugin Fabric built from ``precision=`` (used by the HPU strategies).

        Raises:
            ConfigurationError: For a Lightning plugin that cannot run on HPUs.
        """
        return from_lightning_plugin(plugin, HPUPrecision, cls, ("lightning.", "lightning_fabric."))
