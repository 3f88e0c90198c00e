"""The Trainer precision plugin for HPUs: per-operator mixed precision with operator lists."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.plugins.precision import Precision
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from ._precision_settings import HPUPrecisionHooks, PrecisionSettings, from_lightning_plugin, loss_scaler

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from lightning.fabric.utilities.types import Steppable
    from torch.optim import Optimizer

__all__ = ["HPUPrecisionPlugin"]


class HPUPrecisionPlugin(HPUPrecisionHooks, Precision):
    """Mixed or true precision on HPUs (``Trainer(accelerator="hpu", precision="bf16-mixed")`` picks it for you).

    With a mixed precision, the forward pass and the steps run inside the SDK's
    ``torch.autocast(device_type="hpu", dtype=...)``: each ATen operator of the SDK's lower-precision list runs in
    bfloat16 (float16 for ``"16-mixed"``), each of its float32 list in float32, a few (``add``, ``cat``, ...) in the
    widest dtype of their inputs, and everything else on its inputs as they are. Weights, gradients and optimizer steps
    stay in float32; the step runs with autocast switched off.

    With ``"fp8"`` (Gaudi2 and later), the steps run inside the SDK's Transformer Engine ``fp8_autocast``:
    :meth:`convert_modules` with ``replace_layers=True`` swaps the model's ``torch.nn.Linear`` layers for
    ``transformer_engine.Linear`` layers, whose matrix products take fp8 operands scaled by delayed scaling
    (``recipe``); everything else runs in float32. On a Gaudi without fp8 the constructor fails with the SDK's reason.

    The SDK reads its lists once, when it loads (in eager mode, the default, at ``import torch``), from the files
    named by ``PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST`` and ``PT_HPU_AUTOCAST_FP32_OPS_LIST``. ``bf16_file_path``
    and ``fp32_file_path`` set those variables when the plugin is built before the SDK has loaded (lazy mode, or
    ``PT_HPU_AUTOLOAD=0``); once it has loaded, they must name the lists it loaded, or the constructor fails with the
    ``export`` lines to set before the process starts.

    Args:
        precision: ``"bf16-mixed"``, ``"16-mixed"`` (Gaudi2 and later), ``"32-true"`` or ``"bf16-true"``
            (bfloat16 weights), ``"fp8"`` (Gaudi2 and later; see :meth:`convert_modules`); Lightning's ``16``,
            ``"bf16"`` and ``32`` map as Lightning maps them.
        opt_level: Only ``"O1"``, the SDK autocast's behaviour (kept for the seeds' signature).
        verbose: Only ``False``: the SDK's autocast does not report its decisions.
        bf16_file_path: Text file naming the lower-precision ATen operators, one per line (it replaces the SDK's
            default list); the list the SDK loaded when omitted.
        fp32_file_path: Text file naming the float32 ATen operators, one per line (it replaces the SDK's default
            list); the list the SDK loaded when omitted.
        device: The device type; only ``"hpu"``.
        fused_clip_norm: Clip gradients by norm (``Trainer(gradient_clip_val=..., gradient_clip_algorithm="norm")``)
            with the SDK's fused ``FusedClipNorm`` kernel (optimum-habana's ``use_fused_clip_norm``) instead of
            ``torch.nn.utils.clip_grad_norm_``. The SDK has no fused clipping by value: with this on,
            ``gradient_clip_algorithm="value"`` is refused.
        scaler: The loss scaler of ``"16-mixed"``: an :class:`~lightning_accel.habana.HPUGradScaler` (the default),
            or a ``torch.amp.GradScaler`` whose settings it takes. The loss is scaled before backward, gradients are
            unscaled before clipping, and a step with inf or NaN gradients is skipped, as Lightning does on GPUs.
            Refused with the other precisions, which need no scaling.

    Raises:
        ConfigurationError: For an unsupported ``precision``, ``opt_level`` or ``verbose``, a missing, unreadable or
            malformed list file, a name that is no ATen operator, lists given with a precision that casts nothing, or
            lists the SDK can no longer load.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUPrecisionPlugin
        >>> plugin = HPUPrecisionPlugin("bf16-mixed", bf16_file_path="ops_bf16.txt")  # doctest: +SKIP
        >>> trainer = Trainer(accelerator="hpu", devices=1, plugins=[plugin])  # doctest: +SKIP
        >>> fp8 = HPUPrecisionPlugin("fp8")  # doctest: +SKIP
        >>> model = fp8.convert_modules(model, replace_layers=True)  # doctest: +SKIP
        >>> trainer = Trainer(accelerator="hpu", devices=1, plugins=[fp8])  # doctest: +SKIP
        >>> fused = HPUPrecisionPlugin("bf16-mixed", fused_clip_norm=True)  # doctest: +SKIP
        >>> trainer = Trainer(accelerator="hpu", plugins=[fused], gradient_clip_val=1.0)  # doctest: +SKIP
    """

    def __init__(
        self,
        precision: str | int = "32-true",
        opt_level: str = "O1",
        verbose: bool = False,
        bf16_file_path: str | Path | None = None,
        fp32_file_path: str | Path | None = None,
        device: str = "hpu",
        fused_clip_norm: bool = False,
        scaler: Any = None,
    ) -> None:
        if not isinstance(fused_clip_norm, bool):
            raise ConfigurationError(
                f"HPUPrecisionPlugin(fused_clip_norm={fused_clip_norm!r}) is not a bool. Accepted: True (clip by norm "
                "with the SDK's FusedClipNorm) or False (torch.nn.utils.clip_grad_norm_)."
            )
        if device != "hpu":
            raise ConfigurationError(
                f"HPUPrecisionPlugin(device={device!r}) is not supported. Accepted: 'hpu'. For other devices use "
                "Lightning's own precision plugins (Trainer(precision=...))."
            )
        self._settings = PrecisionSettings.create(precision, opt_level, verbose, bf16_file_path, fp32_file_path)
        self.precision = self._settings.precision  # type: ignore[assignment]
        self._init_fp8()
        self.opt_level = opt_level
        self.verbose = verbose
        self.bf16_file_path = bf16_file_path
        self.fp32_file_path = fp32_file_path
        self.device = device
        self.fused_clip_norm = fused_clip_norm
        self.scaler = loss_scaler(self.precision, scaler)

    @property
    def lower_ops(self) -> frozenset[str] | None:
        """The operators run in the lower precision (``None``: the list the SDK loaded)."""
        return self._settings.lower_ops

    @property
    def fp32_ops(self) -> frozenset[str] | None:
        """The operators run in float32 (``None``: the list the SDK loaded)."""
        return self._settings.fp32_ops

    @override
    def optimizer_step(  # type: ignore[override]
        self,
        optimizer: Steppable,
        model: pl.LightningModule,
        closure: Callable[[], Any],
        **kwargs: Any,
    ) -> Any:
        """Run the optimizer step with autocast switched off; the closure's training step casts as usual.

        With ``"16-mixed"``, as Lightning's ``MixedPrecision`` does on GPUs: the gradients are unscaled after the
        closure (before clipping), the step is skipped when they hold an inf or NaN, and the scale is updated.
        """
        if self.scaler is None:
            with self._settings.no_cast_context():
                return super().optimizer_step(optimizer, model, closure, **kwargs)
        if isinstance(optimizer, torch.optim.LBFGS):
            raise ConfigurationError(
                "precision='16-mixed' with torch.optim.LBFGS: loss scaling cannot wrap LBFGS's closure, as on GPUs. "
                "Accepted: another optimizer, or precision='bf16-mixed' (no scaling)."
            )
        closure_result = closure()
        skip_unscaling = closure_result is None and model.automatic_optimization
        if not skip_unscaling:
            self.scaler.unscale_(optimizer)
        self._after_closure(model, optimizer)
        if skip_unscaling:
            return closure_result
        with self._settings.no_cast_context():
            step_output = self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        return step_output

    @override
    def pre_backward(self, tensor: torch.Tensor, module: pl.LightningModule) -> torch.Tensor:  # type: ignore[override]
        """Scale the loss with ``"16-mixed"``, so that small float16 gradients do not flush to zero."""
        if self.scaler is not None:
            tensor = self.scaler.scale(tensor)
        return super().pre_backward(tensor, module)

    @override
    def clip_grad_by_norm(self, optimizer: Optimizer, clip_val: int | float) -> None:
        """Clip by total L2 norm: with the SDK's ``FusedClipNorm`` when ``fused_clip_norm``, else as Lightning does."""
        if not self.fused_clip_norm:
            super().clip_grad_by_norm(optimizer, clip_val)
            return
        from .fused import fused_clip_grad_norm_

        fused_clip_grad_norm_(list(self.main_params(optimizer)), clip_val)

    @override
    def clip_grad_by_value(self, optimizer: Optimizer, clip_val: int | float) -> None:
        """Clip each gradient value to ``[-clip_val, clip_val]``; refused with ``fused_clip_norm`` (no fused kernel)."""
        if self.fused_clip_norm:
            raise ConfigurationError(
                f"gradient_clip_algorithm='value' (gradient_clip_val={clip_val}) with "
                "HPUPrecisionPlugin(fused_clip_norm=True): the Gaudi SDK's fused clipping (FusedClipNorm) clips by "
                "norm only. Accepted: gradient_clip_algorithm='norm' with fused_clip_norm=True, or "
                "fused_clip_norm=False to clip by value with torch."
            )
        super().clip_grad_by_value(optimizer, clip_val)

    @classmethod
    def from_lightning(cls, plugin: Precision) -> Precision:
        """The HPU plugin for a generic plugin Lightning built from ``precision=`` (used by the HPU strategies).

        Raises:
            ConfigurationError: For a plugin that cannot run on HPUs.
        """
        return from_lightning_plugin(plugin, HPUPrecisionPlugin, cls, ("lightning.", "pytorch_lightning."))
