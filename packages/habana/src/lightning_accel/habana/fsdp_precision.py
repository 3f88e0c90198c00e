"""The Trainer precision plugin of :class:`~lightning_accel.habana.HPUFSDPStrategy`."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.plugins.precision import FSDPPrecision
from typing_extensions import override

from ._fsdp import HPUFSDPPrecisionRules

__all__ = ["HPUFSDPPrecision"]


class HPUFSDPPrecision(HPUFSDPPrecisionRules, FSDPPrecision):  # type: ignore[misc]  # Optional MixedPrecision
    """Precision for FSDP on HPUs (``Trainer(strategy="hpu_fsdp", precision="bf16-mixed")`` picks it for you).

    The precisions are Lightning's, with the SDK's autocast in place of CUDA's:

    - ``"bf16-mixed"``: float32 sharded parameters; FSDP gathers bfloat16 copies for the forward and backward passes,
      reduces gradients and keeps buffers in bfloat16 (Lightning's ``MixedPrecision``), and the forward pass runs
      inside the SDK's ``torch.autocast(device_type="hpu", dtype=torch.bfloat16)`` (each ATen operator in the dtype of
      the SDK's operator lists, as with :class:`~lightning_accel.habana.HPUPrecisionPlugin`).
    - ``"bf16-true"``: the module is converted to bfloat16 before sharding (made in bfloat16 under
      ``Trainer.init_module()``), so parameters, gradients and the optimizer state are bfloat16: half the memory of
      float32.
    - ``"16-mixed"`` (Gaudi2 and later): as ``"bf16-mixed"`` in float16, with the loss scaled by an
      :class:`~lightning_accel.habana.HPUShardedGradScaler` (steps with inf or NaN gradients on any rank are skipped on
      all of them).
    - ``"32-true"``: float32 throughout.

    ``"16-true"`` is not offered, as with the other HPU plugins.

    Args:
        precision: ``"bf16-mixed"``, ``"bf16-true"``, ``"16-mixed"`` or ``"32-true"``.
        device: The device type; only ``"hpu"``.
        recipe: Kept from lightning-habana's signature; only ``None`` (fp8 does not run under FSDP).
        replace_layers: Kept from lightning-habana's signature; only ``False``.
        scaler: The loss scaler of ``"16-mixed"``: an :class:`~lightning_accel.habana.HPUShardedGradScaler` (the
            default), or a ``torch.amp.GradScaler`` (torch's ``ShardedGradScaler`` too) whose settings it takes.

    Raises:
        ConfigurationError: For another precision or device, fp8 arguments, a scaler with a precision other than
            ``"16-mixed"``.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUFSDPPrecision, HPUFSDPStrategy
        >>> strategy = HPUFSDPStrategy(precision_plugin=HPUFSDPPrecision("bf16-mixed"))
        >>> trainer = Trainer(accelerator="hpu", devices=2, strategy=strategy)  # doctest: +SKIP
    """

    fsdp_module: torch.nn.Module | None = None
    """The root FSDP module, set by :class:`~lightning_accel.habana.HPUFSDPStrategy` once it has wrapped the model."""

    @override
    def clip_grad_by_norm(self, *args: Any, **kwargs: Any) -> None:
        """Clip by the norm over all ranks' shards with FSDP's own ``clip_grad_norm_`` on the root module.

        ``Trainer(gradient_clip_val=...)`` with FSDP, which Lightning's own FSDP precision refuses. With
        ``"16-mixed"`` the gradients are unscaled before they are clipped.
        """
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        module = self.fsdp_module
        if not isinstance(module, FSDP):
            # The model was wrapped by the user (configure_sharded_model): no root to ask, Lightning's refusal.
            super().clip_grad_by_norm(*args, **kwargs)
            return
        clip_val = kwargs["clip_val"] if "clip_val" in kwargs else args[1]
        module.clip_grad_norm_(clip_val)
