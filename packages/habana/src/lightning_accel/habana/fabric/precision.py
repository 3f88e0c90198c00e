"""The Fabric precision plugin for HPUs (the counterpart of :class:`~lightning_accel.habana.HPUPrecisionPlugin`)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins import Precision
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from .._precision_settings import PrecisionSettings, convert_floats, default_dtype, normalize_precision

__all__ = ["HPUPrecision"]

_GENERIC = ("Precision", "MixedPrecision", "HalfPrecision", "DoublePrecision")


class HPUPrecision(Precision):
    """Mixed or true precision on HPUs for Fabric (``Fabric(accelerator="hpu", precision="bf16-mixed")`` picks it).

    The arguments and behaviour are those of :class:`~lightning_accel.habana.HPUPrecisionPlugin`: per-operator
    casting inside ``forward`` of modules set up by Fabric and inside ``fabric.autocast()``, none in the optimizer
    step.

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
    ) -> None:
        self._settings = PrecisionSettings.create(precision, opt_level, verbose, bf16_file_path, fp32_file_path)
        self.precision = self._settings.precision  # type: ignore[assignment]
        self.opt_level = opt_level
        self.verbose = verbose

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        """Per-operator casting (bfloat16 default dtype for ``"bf16-true"``)."""
        return self._settings.cast_context()

    @override
    def optimizer_step(self, optimizer: Any, **kwargs: Any) -> Any:
        """Run the optimizer step with casting switched off."""
        with self._settings.no_cast_context():
            return super().optimizer_step(optimizer, **kwargs)

    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """bfloat16 weights for ``"bf16-true"``."""
        return module.to(dtype=torch.bfloat16) if self.precision == "bf16-true" else module

    @override
    def tensor_init_context(self) -> AbstractContextManager[Any]:
        """Create floating-point tensors in bfloat16 for ``"bf16-true"``."""
        return default_dtype(torch.bfloat16) if self.precision == "bf16-true" else nullcontext()

    @override
    def module_init_context(self) -> AbstractContextManager[Any]:
        """Create module parameters in bfloat16 for ``"bf16-true"``."""
        return self.tensor_init_context()

    @override
    def convert_input(self, data: Any) -> Any:
        """Floating-point inputs in bfloat16 for ``"bf16-true"``."""
        return convert_floats(data, torch.bfloat16) if self.precision == "bf16-true" else data

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
        if isinstance(plugin, HPUPrecision):
            return plugin
        if type(plugin).__name__ in _GENERIC:
            return cls(normalize_precision(getattr(plugin, "precision", "32-true")))
        if type(plugin).__module__.startswith(("lightning.", "lightning_fabric.")):
            raise ConfigurationError(
                f"The precision plugin {type(plugin).__name__} cannot run on HPUs. Accepted: precision='bf16-mixed', "
                "'16-mixed', '32-true' or 'bf16-true', or plugins=[HPUPrecision(...)]."
            )
        return plugin
