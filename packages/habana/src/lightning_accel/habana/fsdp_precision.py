"""The Trainer precision plugin of :class:`~lightning_accel.habana.HPUFSDPStrategy`."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.plugins.precision import FSDPPrecision
from typing_extensions import override

from . import sdk
from ._fsdp import check_device, check_precision, check_unsupported_fp8_arguments, mixed_precision_config

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecision

__all__ = ["HPUFSDPPrecision"]


class HPUFSDPPrecision(FSDPPrecision):
    """Precision for FSDP on HPUs (``Trainer(strategy="hpu_fsdp", precision="bf16-mixed")`` picks it for you).

    ``"bf16-mixed"``: float32 parameters and buffers, the forward pass inside the SDK's
    ``torch.autocast(device_type="hpu", dtype=torch.bfloat16)`` (each ATen operator in the dtype of the SDK's operator
    lists, as with :class:`~lightning_accel.habana.HPUPrecisionPlugin`), gradients reduced across ranks in bfloat16.
    ``"32-true"``: float32 throughout.

    Args:
        precision: ``"bf16-mixed"`` or ``"32-true"``.
        device: The device type; only ``"hpu"``.
        recipe: Kept from lightning-habana's signature; only ``None`` (fp8 does not run under FSDP).
        replace_layers: Kept from lightning-habana's signature; only ``False``.

    Raises:
        ConfigurationError: For another precision or device, or fp8 arguments.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUFSDPPrecision, HPUFSDPStrategy
        >>> strategy = HPUFSDPStrategy(precision_plugin=HPUFSDPPrecision("bf16-mixed"))
        >>> trainer = Trainer(accelerator="hpu", devices=2, strategy=strategy)  # doctest: +SKIP
    """

    def __init__(
        self, precision: str, device: str = "hpu", recipe: Any | None = None, replace_layers: bool = False
    ) -> None:
        check_device(device)
        check_unsupported_fp8_arguments(recipe, replace_layers)
        super().__init__(check_precision(precision, "HPUFSDPPrecision"))  # type: ignore[arg-type]
        self.device = device

    @property
    @override
    def mixed_precision_config(self) -> MixedPrecision | None:  # type: ignore[override]
        """The ``MixedPrecision`` FSDP wraps the model with (``None`` for ``"32-true"``)."""
        return mixed_precision_config(self.precision)

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        """The SDK's bfloat16 autocast for ``"bf16-mixed"``; float32 as the default dtype for ``"32-true"``."""
        if self.precision == "bf16-mixed":
            return sdk.autocast(torch.bfloat16)
        return super().forward_context()
