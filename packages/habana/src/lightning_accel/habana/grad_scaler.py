"""Loss scaling for float16 on HPUs, from operators the Gaudi SDK has.

torch's ``GradScaler`` unscales and updates with two fused operators, ``_amp_foreach_non_finite_check_and_unscale_``
and ``_amp_update_scale_``. The Gaudi bridge has no HPU kernel for either: its operator table lists both as missing
on the HPU, and its operator statistics exclude them as "GPU backend specific" (gaudi-pytorch-bridge 1.19
``scripts/ops_list/ops_table.csv``, ``scripts/ops_stats_data/exclude_ops.csv``). :class:`HPUGradScaler` is torch's
scaler with those two steps written in operators every HPU runs (``isfinite``, ``mul_``, ``where``), with the same
semantics: a step whose gradients hold an inf or NaN is skipped and the scale backs off; after ``growth_interval``
clean steps it grows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from typing_extensions import override

__all__ = ["HPUGradScaler", "HPUShardedGradScaler", "hpu_scaler_like"]


class HPUGradScaler(torch.amp.GradScaler):
    """torch's ``GradScaler`` for ``"hpu"``, unscaling and updating with operators the SDK has.

    ``HPUPrecisionPlugin("16-mixed")`` (``Trainer(accelerator="hpu", precision="16-mixed")``) uses one by default.

    Args:
        init_scale: The first scale factor.
        growth_factor: The factor the scale grows by after ``growth_interval`` steps with finite gradients.
        backoff_factor: The factor the scale shrinks by when a step finds an inf or NaN gradient (that step is skipped).
        growth_interval: How many clean steps in a row make the scale grow.
        enabled: ``False`` makes every method a no-op, as torch's.

    Example:
        >>> from lightning_accel.habana import HPUGradScaler, HPUPrecisionPlugin
        >>> plugin = HPUPrecisionPlugin("16-mixed", scaler=HPUGradScaler(init_scale=2.0**12))  # doctest: +SKIP
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__(
            "hpu",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )

    @override
    def _unscale_grads_(
        self, optimizer: torch.optim.Optimizer, inv_scale: torch.Tensor, found_inf: torch.Tensor, allow_fp16: bool
    ) -> dict[torch.device, torch.Tensor]:
        found: dict[torch.device, torch.Tensor] = {}
        with torch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    grad = param.grad
                    if grad is None:
                        continue
                    if not allow_fp16 and grad.dtype == torch.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    if grad.is_sparse:
                        raise ValueError(
                            "HPUGradScaler cannot unscale sparse gradients: HPUs have dense kernels only. Use dense "
                            "gradients (for example nn.Embedding(sparse=False))."
                        )
                    device = grad.device
                    if device not in found:
                        found[device] = found_inf.to(device, copy=True)
                    nonfinite = (~torch.isfinite(grad)).any().to(found[device].dtype)
                    found[device] = torch.maximum(found[device], nonfinite)
                    grad.mul_(inv_scale.to(device))
        return found

    @override
    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Update the scale: back off after a skipped step, grow after ``growth_interval`` clean ones."""
        if not self._enabled:
            return
        if new_scale is not None:
            super().update(new_scale)
            return
        scale, tracker = self._check_scale_growth_tracker("update")
        found_infs = [
            found_inf.to(device=scale.device)
            for state in self._per_optimizer_states.values()
            for found_inf in state["found_inf_per_device"].values()
        ]
        if not found_infs:
            raise AssertionError("No inf checks were recorded prior to update.")
        skipped = torch.stack(found_infs).sum() > 0
        clean_steps = tracker + 1
        grows = clean_steps >= self._growth_interval
        grown = scale * self._growth_factor
        new = torch.where(
            skipped,
            scale * self._backoff_factor,
            torch.where(grows & torch.isfinite(grown), grown, scale),
        )
        scale.copy_(new)
        tracker.copy_(torch.where(skipped | grows, torch.zeros_like(tracker), clean_steps))
        self._per_optimizer_states = defaultdict(torch.amp.grad_scaler._refresh_per_optimizer_state)


class HPUShardedGradScaler(HPUGradScaler):
    """:class:`HPUGradScaler` for FSDP: every rank skips the same steps.

    Each FSDP rank holds the gradients of its own shard, so an inf or NaN found on one rank is summed over the process
    group before the step, as torch's ``ShardedGradScaler`` does (an all-reduce the SDK's HCCL runs on HPU tensors;
    the finding of gradients offloaded to the host goes through the HPU for it). ``HPUFSDPPrecision("16-mixed")``
    (``Trainer(strategy="hpu_fsdp", precision="16-mixed")``) uses one by default.

    Args:
        init_scale: As :class:`HPUGradScaler`.
        growth_factor: As :class:`HPUGradScaler`.
        backoff_factor: As :class:`HPUGradScaler`.
        growth_interval: As :class:`HPUGradScaler`.
        enabled: As :class:`HPUGradScaler`.
        process_group: The ranks that share the finding (``None``: all of them).

    Example:
        >>> from lightning_accel.habana import HPUFSDPPrecision, HPUShardedGradScaler
        >>> plugin = HPUFSDPPrecision("16-mixed", scaler=HPUShardedGradScaler(init_scale=2.0**12))  # doctest: +SKIP
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
        process_group: Any = None,
    ) -> None:
        super().__init__(init_scale, growth_factor, backoff_factor, growth_interval, enabled)
        self.process_group = process_group

    @override
    def _unscale_grads_(
        self, optimizer: torch.optim.Optimizer, inv_scale: torch.Tensor, found_inf: torch.Tensor, allow_fp16: bool
    ) -> dict[torch.device, torch.Tensor]:
        import torch.distributed as dist

        found = super()._unscale_grads_(optimizer, inv_scale, found_inf, allow_fp16)
        if not dist.is_available() or not dist.is_initialized():
            return found
        if not found:
            # A rank whose shard has no gradient still takes part in the collective the others start.
            found = {inv_scale.device: found_inf.to(inv_scale.device, copy=True)}
        for device, finding in found.items():
            on_hpu = finding.to(inv_scale.device)
            dist.all_reduce(on_hpu, group=self.process_group)
            found[device] = on_hpu.to(device)
        return found


def hpu_scaler_like(scaler: Any, sharded: bool = False) -> HPUGradScaler:
    """The HPU scaler for a user's ``torch.amp.GradScaler``: the same settings and current scale.

    An :class:`HPUGradScaler` (an :class:`HPUShardedGradScaler` with ``sharded=True``) is returned as it is; ``None``
    or a disabled scaler of another device (torch disables a CUDA scaler where CUDA is missing) gives the default one.
    """
    kind = HPUShardedGradScaler if sharded else HPUGradScaler
    if scaler is None:
        return kind()
    if isinstance(scaler, kind):
        return scaler
    if not isinstance(scaler, torch.amp.GradScaler):
        raise TypeError(
            f"scaler={type(scaler).__name__} is not a torch.amp.GradScaler. Accepted: an {kind.__name__}, or a "
            "torch.amp.GradScaler whose settings it takes."
        )
    if not scaler.is_enabled():
        # torch disables a CUDA scaler where CUDA is missing: that is the one Lightning builds for "16-mixed" before
        # the HPU strategy swaps its precision plugin, not a user's wish to train without scaling.
        return kind(enabled=getattr(scaler, "_device", "cuda") != "hpu")
    hpu = kind(
        init_scale=scaler.get_scale(),
        growth_factor=scaler.get_growth_factor(),
        backoff_factor=scaler.get_backoff_factor(),
        growth_interval=scaler.get_growth_interval(),
    )
    if isinstance(hpu, HPUShardedGradScaler):
        hpu.process_group = getattr(scaler, "process_group", None)
    return hpu
