"""Per-rank memory of parameters, gradients and optimizer state under DeepSpeed, for benchmarks of the ZeRO stages.

Each tensor storage is counted once, in the first category that reaches it: parameters (the rank's own ZeRO-3
partitions, ``ds_tensor``, or the full parameters below stage 3), then gradients (``.grad`` of those and of the
optimizer's flat fp32 partitions, and DeepSpeed's gradient partitions), then optimizer state (the fp32 master
partitions the optimizer steps, and its ``state``: Adam's moments).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ZeroMemory", "zero_memory"]


@dataclass(frozen=True)
class ZeroMemory:
    """Bytes held by one rank.

    Attributes:
        parameters: Model parameters this rank holds.
        gradients: Gradients this rank holds.
        optimizer_state: Optimizer state this rank holds (master weights and moments).
    """

    parameters: int
    gradients: int
    optimizer_state: int

    @property
    def total(self) -> int:
        """All three together."""
        return self.parameters + self.gradients + self.optimizer_state


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


class _Ledger:
    def __init__(self) -> None:
        self._seen: set[int] = set()

    def count(self, tensors: Iterable[torch.Tensor | None]) -> int:
        total = 0
        for tensor in tensors:
            if tensor is None or tensor.numel() == 0:
                continue
            storage = tensor.untyped_storage()
            if storage.data_ptr() in self._seen:
                continue
            self._seen.add(storage.data_ptr())
            total += storage.nbytes()
        return total


def zero_memory(engine: Any) -> ZeroMemory:
    """What this rank holds, measured on a ``deepspeed.DeepSpeedEngine`` (``trainer.strategy.deepspeed_engine``).

    Call it where gradients exist, e.g. in a callback's ``on_before_optimizer_step``.

    Example:
        >>> from lightning.pytorch.callbacks import Callback
        >>> from lightning_accel.deepspeed_hpu import zero_memory
        >>> class Measure(Callback):
        ...     def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        ...         self.memory = zero_memory(trainer.strategy.deepspeed_engine)
    """
    ledger = _Ledger()
    params = list(engine.module.parameters())
    parameters = ledger.count(getattr(p, "ds_tensor", p) for p in params)
    optimizer = getattr(engine, "optimizer", None)
    inner = getattr(optimizer, "optimizer", optimizer)
    inner_params = [p for group in getattr(inner, "param_groups", []) for p in group["params"]]
    grads: list[torch.Tensor | None] = [p.grad for p in params]
    grads += [getattr(p, "ds_tensor", p).grad for p in params if hasattr(p, "ds_tensor")]
    grads += [p.grad for p in inner_params]
    for name in ("averaged_gradients", "fp32_partitioned_groups_flat_grad", "grads_in_partition"):
        grads += list(_tensors(getattr(optimizer, name, None)))
    gradients = ledger.count(grads)
    state = list(inner_params) + list(_tensors(list(getattr(inner, "state", {}).values())))
    optimizer_state = ledger.count(state)
    return ZeroMemory(parameters, gradients, optimizer_state)
