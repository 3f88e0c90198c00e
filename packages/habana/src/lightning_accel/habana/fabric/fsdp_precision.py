"""The Fabric precision plugin of :class:`~lightning_accel.habana.fabric.HPUFSDPStrategy`."""

from __future__ import annotations

from lightning.fabric.plugins.precision import FSDPPrecision

from .._fsdp import HPUFSDPPrecisionRules

__all__ = ["HPUFSDPPrecision"]


class HPUFSDPPrecision(HPUFSDPPrecisionRules, FSDPPrecision):  # type: ignore[misc]  # Optional MixedPrecision
    """Precision for FSDP on HPUs with Fabric (``Fabric(strategy="hpu_fsdp", precision="bf16-mixed")`` picks it).

    The arguments and behaviour are those of the Trainer's :class:`~lightning_accel.habana.HPUFSDPPrecision`:
    ``"bf16-mixed"`` and ``"16-mixed"`` run the forward pass of modules set up by Fabric (and ``fabric.autocast()``)
    inside the SDK's autocast, with float32 sharded parameters gathered in the 16-bit dtype (``"16-mixed"`` scales the
    loss with an :class:`~lightning_accel.habana.HPUShardedGradScaler`); ``"bf16-true"`` shards bfloat16 weights
    (made in bfloat16 under ``fabric.init_module()``); ``"32-true"`` is float32.

    Raises:
        ConfigurationError: For another precision or device, fp8 arguments, a scaler with a precision other than
            ``"16-mixed"``.

    Example:
        >>> from lightning.fabric import Fabric
        >>> from lightning_accel.habana.fabric import HPUFSDPPrecision, HPUFSDPStrategy
        >>> strategy = HPUFSDPStrategy(precision=HPUFSDPPrecision("bf16-mixed"))
        >>> fabric = Fabric(accelerator="hpu", devices=2, strategy=strategy)  # doctest: +SKIP
    """
