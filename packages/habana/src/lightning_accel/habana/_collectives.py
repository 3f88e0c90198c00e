"""All-reduce over HCCL with the reduce operations HCCL supports, shared by the Trainer and Fabric strategies."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = ["all_reduce", "resolve_reduce_op"]

_BY_NAME = {"sum": "SUM", "min": "MIN", "max": "MAX", "mean": "AVG", "avg": "AVG"}
_ACCEPTED = "Accepted: 'sum', 'mean' (or 'avg'), 'min', 'max', or the matching torch.distributed.ReduceOp."


def resolve_reduce_op(reduce_op: Any) -> tuple[Any, bool]:
    """Return the ``ReduceOp`` to run and whether to divide by the world size afterwards (for the mean).

    ``None`` means sum, as for ``torch.distributed.all_reduce``. HCCL has no average, so the mean is a sum followed by
    a division.

    Args:
        reduce_op: ``"sum"``, ``"mean"`` (or ``"avg"``), ``"min"``, ``"max"`` (any case), the matching
            ``torch.distributed.ReduceOp``, or ``None``.

    Raises:
        ConfigurationError: For any other operation.
    """
    if reduce_op is None:
        return dist.ReduceOp.SUM, False
    if isinstance(reduce_op, str):
        name = _BY_NAME.get(reduce_op.strip().lower())
    else:
        name = next((n for n in ("SUM", "MIN", "MAX", "AVG") if reduce_op == getattr(dist.ReduceOp, n)), None)
    if name is None:
        raise ConfigurationError(f"reduce_op={reduce_op!r} is not supported on HPU. {_ACCEPTED}")
    if name == "AVG":
        return dist.ReduceOp.SUM, True
    return getattr(dist.ReduceOp, name), False


def all_reduce(tensor: Any, group: Any | None = None, reduce_op: Any = "mean") -> Any:
    """Reduce ``tensor`` over all processes in place and return it; non-tensors and single processes pass through.

    A host tensor is reduced through this process's HPU (HCCL serves HPU tensors only) and stays on the host.

    Args:
        tensor: The tensor to reduce; anything else is returned unchanged.
        group: The process group; the whole world when ``None``.
        reduce_op: As for :func:`resolve_reduce_op`. Integer means are rounded down.

    Raises:
        ConfigurationError: When ``reduce_op`` is not one of sum, mean, min or max.
    """
    op, divide = resolve_reduce_op(reduce_op)
    if not isinstance(tensor, torch.Tensor) or not (dist.is_available() and dist.is_initialized()):
        return tensor
    group = dist.group.WORLD if group is None else group
    # HCCL reduces HPU tensors only: a host tensor (a metric computed on the CPU) goes through this process's HPU and
    # gets the result back in place, as lightning-habana's reduce moved it to the root device.
    work = tensor if tensor.device.type == sdk.DEVICE_TYPE else tensor.to(sdk.DEVICE_TYPE)
    dist.all_reduce(work, op=op, group=group)
    if divide:
        world_size = dist.get_world_size(group)
        if torch.is_floating_point(work) or torch.is_complex(work):
            work.div_(world_size)
        else:
            work.copy_(torch.div(work, world_size, rounding_mode="floor"))
    if work is not tensor:
        tensor.copy_(work.to(tensor.device))
    return tensor
