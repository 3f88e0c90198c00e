"""The Fabric precision plugin of :class:`~lightning_accel.habana.fabric.HPUFSDPStrategy`."""

from __future__ import annotations

from lightning.fabric.plugins.precision import FSDPPrecision

from .._fsdp import HPUFSDPPrecisionRules

__all__ = ["HPUFSDPPrecision"]


class HPUFSDPPrecision(HPUFSDPPrecisionRules, FSDPPrecision):  # type: ignore[misc]  # Optional MixedPrecision
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
