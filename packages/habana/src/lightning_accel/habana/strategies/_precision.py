"""The precision setter shared by the Trainer's HPU strategies."""

from __future__ import annotations

from lightning.pytorch.plugins.precision import Precision

from ..precision import HPUPrecisionPlugin

__all__ = ["HPUPrecisionSetter"]


class HPUPrecisionSetter:
    """Mixin: Lightning's generic precision plugins (built from ``precision=``) become :class:`HPUPrecisionPlugin`.

    Lightning's connector assigns the plugin it built for ``precision="bf16-mixed"`` (a CUDA ``MixedPrecision``)
    through this setter, so ``Trainer(accelerator="hpu", precision="bf16-mixed")`` needs no HPU class in user code.
    """

    _precision_plugin: Precision | None

    @property
    def precision_plugin(self) -> Precision:
        """The precision plugin; float32 :class:`HPUPrecisionPlugin` until one is set."""
        if self._precision_plugin is None:
            self._precision_plugin = HPUPrecisionPlugin()
        return self._precision_plugin

    @precision_plugin.setter
    def precision_plugin(self, precision_plugin: Precision | None) -> None:
        self._precision_plugin = (
            None if precision_plugin is None else HPUPrecisionPlugin.from_lightning(precision_plugin)
        )
