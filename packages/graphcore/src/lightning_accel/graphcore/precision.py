"""``IPUPrecision`` (alias ``IPUPrecisionPlugin``): float32, float16 mixed or pure float16 on IPUs.

For float16 gradients that underflow, poptorch 3.4 has a static loss scale (``poptorch.optim`` optimizers'
``loss_scaling``) and automatic loss scaling, a preview feature switched on in the training options with
``Training.setAutomaticLossScaling(True)`` (poptorch ``python/options.py:336-357``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.utilities import GradClipAlgorithmType
from lightning_utilities.core.apply_func import apply_to_collection
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from ._host_optimizer import without_parameters

__all__ = ["IPUPrecision", "IPUPrecisionPlugin", "SUPPORTED_PRECISION"]

SUPPORTED_PRECISION = ("32-true", "16-mixed", "16-true")
_ALIASES: dict[Any, str] = {
    32: "32-true",
    "32": "32-true",
    "32-true": "32-true",
    16: "16-mixed",
    "16": "16-mixed",
    "16-mixed": "16-mixed",
    "16-true": "16-true",
}


def normalize_precision(precision: Any, argument: str = "precision") -> str:
    """The canonical name of ``precision``.

    Raises:
        ConfigurationError: When IPUs do not support it.
    """
    canonical = _ALIASES.get(precision) if isinstance(precision, (int, str)) else None
    if canonical is None:
        raise ConfigurationError(
            f"{argument}={precision!r} is not supported on IPUs. Accepted: {', '.join(map(repr, SUPPORTED_PRECISION))} "
            "(16 means '16-mixed'). bfloat16 and float64 do not exist on IPUs."
        )
    return canonical


class IPUPrecision(Precision):
    """Precision on IPUs: ``"32-true"`` (default), ``"16-mixed"`` (float16 inputs) or ``"16-true"`` (float16 model).

    With ``"16-mixed"`` floating-point inputs are cast to float16 on the host; operations that mix them with float32
    weights run in float32 (poptorch's default casting), so a model converted with ``model.half()`` trains purely in
    float16. ``"16-true"`` converts the model to float16 itself. The optimizer step and backward run on the device,
    so this plugin never calls them on the host. Gradient clipping by norm is applied on the device by
    :class:`~lightning_accel.graphcore.IPUStrategy`; clipping by value is refused.

    Example:
        >>> IPUPrecision("16-mixed").precision
        '16-mixed'
    """

    def __init__(self, precision: str | int = "32-true") -> None:
        super().__init__()
        self.precision = normalize_precision(precision)  # type: ignore[assignment]

    @property
    def half_inputs(self) -> bool:
        """Whether floating-point inputs are cast to float16 on the host."""
        return self.precision in ("16-mixed", "16-true")

    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.half() if self.precision == "16-true" else module

    @override
    def convert_input(self, data: Any) -> Any:
        if not self.half_inputs:
            return data
        return apply_to_collection(
            data, torch.Tensor, lambda t: t.half() if t.is_floating_point() and t.dtype != torch.float16 else t
        )

    @override
    def backward(self, tensor: torch.Tensor, model: Any, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        # poptorch runs backward inside the compiled training step.
        return None

    @override
    def optimizer_step(  # type: ignore[override]
        self, optimizer: Any, model: Any, closure: Callable[[], Any], **kwargs: Any
    ) -> Any:
        """Run the closure (the device step: forward, backward and weight updates) and the hooks after it."""
        if isinstance(optimizer, torch.optim.LBFGS):
            raise ConfigurationError("LBFGS is not supported on IPUs: use SGD, Adam, AdamW or RMSprop.")
        closure_result = closure()
        self._after_closure(model, optimizer)
        # The device has updated the weights. The host optimizer still steps, so that step hooks fire and
        # learning-rate schedulers see that a step happened, but without parameters: on IPUs each read of one copies
        # every weight to the host (see _host_optimizer), and the host has no gradient to apply.
        with without_parameters(optimizer):
            optimizer.step()
        return closure_result

    @override
    def clip_gradients(
        self,
        optimizer: torch.optim.Optimizer,
        clip_val: int | float = 0.0,
        gradient_clip_algorithm: GradClipAlgorithmType = GradClipAlgorithmType.NORM,
    ) -> None:
        """Clipping happens on the device (by norm); refuse clipping by value."""
        if clip_val <= 0:
            return
        if gradient_clip_algorithm == GradClipAlgorithmType.VALUE:
            raise ConfigurationError(
                f"gradient_clip_algorithm='value' (gradient_clip_val={clip_val}) is not supported on IPUs: gradients "
                "never leave the device. Use gradient_clip_algorithm='norm', which the IPU applies to every weight "
                "update."
            )


IPUPrecisionPlugin = IPUPrecision
