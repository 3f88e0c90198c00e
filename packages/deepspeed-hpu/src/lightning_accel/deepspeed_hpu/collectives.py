"""All-reduce with the operations HCCL supports (it has no average: the mean is a sum divided by the world size)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from lightning_accel.core.errors import ConfigurationError

__all__ = ["all_reduce"]

_BY_NAME = {"sum": "SUM", "min": "MIN", "max": "MAX", "mean": "AVG", "avg": "AVG"}


def all_reduce(tensor: Any, group: Any | None = None, reduce_op: Any = "mean") -> Any:
    """Reduce ``tensor`` over the processes in place and return it; non-tensors and single processes pass through.

    Raises:
        ConfigurationError: For an operation other than sum, mean (avg), min and max.
    """
    if reduce_op is None:
        name: str | None = "SUM"
    elif isinstance(reduce_op, str):
        name = _BY_NAME.get(reduce_op.strip().lower())
    else:
        name = next((n for n in ("SUM", "MIN", "MAX", "AVG") if reduce_op == getattr(dist.ReduceOp, n)), None)
    if name is None:
        raise ConfigurationError(
            f"reduce_op={reduce_op!r} is not supported on HPU. Accepted: 'sum', 'mean' (or 'avg'), 'min', 'max', "
            "or the matching torch.distributed.ReduceOp."
        )
    if not isinstance(tensor, torch.Tensor) or not (dist.is_available() and dist.is_initialized()):
        return tensor
    group = dist.group.WORLD if group is None else group
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM if name == "AVG" else getattr(dist.ReduceOp, name), group=group)
    if name != "AVG":
        return tensor
    size = dist.get_world_size(group)
    if torch.is_floating_point(tensor):
        return tensor.div_(size)
    return tensor.copy_(torch.div(tensor, size, rounding_mode="floor"))
