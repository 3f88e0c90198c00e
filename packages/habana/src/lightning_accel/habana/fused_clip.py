"""Fused gradient clipping from ``Trainer(precision=...)``: the SDK's ``FusedClipNorm`` without building the plugin.

``HPUPrecisionPlugin(..., fused_clip_norm=True)`` clips through the SDK's fused kernel, but a Trainer given only a
precision string (``precision="bf16-mixed"``) builds its plugin itself. :class:`HPUFusedClipNorm` turns the fused
clipping on in that plugin for the run (optimum-habana's ``use_fused_clip_norm``).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from .precision import HPUPrecisionPlugin

__all__ = ["HPUFusedClipNorm"]


class HPUFusedClipNorm(Callback):
    """Clip gradients by norm with the SDK's ``FusedClipNorm``, whatever built the HPU precision plugin.

    With ``Trainer(accelerator="hpu", precision=..., gradient_clip_val=...)`` the clipping (by norm, Lightning's
    default algorithm) runs the SDK's fused kernel instead of ``torch.nn.utils.clip_grad_norm_``; the plugin's setting
    is put back after the run. It refuses, before the run, what would leave it without effect: no
    ``gradient_clip_val``, clipping by value (the SDK has no fused kernel for it), or a precision plugin that is not
    the HPU one (DeepSpeed and FSDP clip in their own way).

    Raises:
        ConfigurationError: At setup, for the cases above.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana.fused_clip import HPUFusedClipNorm
        >>> trainer = Trainer(  # doctest: +SKIP
        ...     accelerator="hpu", precision="bf16-mixed", gradient_clip_val=1.0, callbacks=[HPUFusedClipNorm()]
        ... )
    """

    def __init__(self) -> None:
        self._plugin: HPUPrecisionPlugin | None = None
        self._before = False

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        plugin = trainer.precision_plugin
        if not isinstance(plugin, HPUPrecisionPlugin):
            raise ConfigurationError(
                f"HPUFusedClipNorm needs the HPU precision plugin, but the run's plugin is {type(plugin).__name__} "
                f"(strategy {type(trainer.strategy).__name__}), which clips in its own way. Accepted: "
                "Trainer(accelerator='hpu', precision=...) with a single-HPU or DDP strategy; drop the callback "
                "otherwise."
            )
        if not trainer.gradient_clip_val:
            raise ConfigurationError(
                f"HPUFusedClipNorm with gradient_clip_val={trainer.gradient_clip_val!r}: nothing would be clipped. "
                "Accepted: Trainer(gradient_clip_val=<max norm>), or drop the callback."
            )
        algorithm = str(getattr(trainer.gradient_clip_algorithm, "value", trainer.gradient_clip_algorithm) or "norm")
        if algorithm != "norm":
            raise ConfigurationError(
                f"HPUFusedClipNorm with gradient_clip_algorithm={algorithm!r}: the SDK's FusedClipNorm clips by norm "
                "only. Accepted: gradient_clip_algorithm='norm' (the default), or drop the callback to clip by value "
                "with torch."
            )
        self._plugin, self._before = plugin, plugin.fused_clip_norm
        plugin.fused_clip_norm = True

    @override
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._plugin is not None:
            self._plugin.fused_clip_norm = self._before
            self._plugin = None
