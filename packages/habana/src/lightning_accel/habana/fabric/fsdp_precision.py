"""The Fabric precision plugin of :class:`~lightning_accel.habana.fabric.HPUFSDPStrategy`."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.plugins.precision import FSDPPrecision
from typing_extensions import override

from .. import sdk
from .._fsdp import check_device, check_precision, check_unsupported_fp8_arguments, mixed_precision_config

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecision

__all__ = ["HPUFSDPPrecision"]


class HPUFSDPPrecision(FSDPPrecision):
    """Precision for FSDP on HPUs with Fabric (``Fabric(strategy="hpu_fsdp", precision="bf16-mixed")`` picks it).

    The arguments and behaviour are those of the Trainer's :class:`~lightning_accel.habana.HPUFSDPPrecision`:
    ``"bf16-mixed"`` runs the forward pass of modules set up by Fabric (and ``fabric.autocast()``) inside the SDK's
    bfloat16 autocast, with float32 parameters and bfloat16 gradient reduction; ``"32-true"`` is float32.

    Raises:
        ConfigurationError: For another precision or device, or fp8 arguments.

    Example:
        >>> from lightning.fabric import Fabric
        >>> from lightning_accel.habana.fabric import HPUFSDPPrecision, HPUFSDPStrategy
        >>> strategy = HPUFSDPStrategy(precision=HPUFSDPPrecision("bf16-mixed"))
        >>> fabric = Fabric(accelerator="hpu", devices=2, strategy=strategy)  # doctest: +SKIP
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
        """The ``MixedPrecision`` FSDP wraps the module with (``None`` for ``"32-true"``)."""
        return mixed_precision_config(self.precision)

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        """The SDK's bfloat16 autocast for ``"bf16-mixed"``; float32 as the default dtype for ``"32-true"``."""
        if self.precision == "bf16-mixed":
            return sdk.autocast(torch.bfloat16)
        return super().forward_context()
