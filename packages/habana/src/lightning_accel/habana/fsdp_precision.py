"""The Trainer precision plugin of :class:`~lightning_accel.habana.HPUFSDPStrategy`."""

from __future__ import annotations

from lightning.pytorch.plugins.precision import FSDPPrecision

from ._fsdp import HPUFSDPPrecisionRules

__all__ = ["HPUFSDPPrecision"]


class HPUFSDPPrecision(HPUFSDPPrecisionRules, FSDPPrecision):  # type: ignore[misc]  # Optional MixedPrecision
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
