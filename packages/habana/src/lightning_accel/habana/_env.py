"""The environment side effects of ``initialize_distributed_hpu``, undone when a strategy tears down."""

from __future__ import annotations

import os
from collections.abc import Mapping

from . import sdk

__all__ = ["initialize_hccl", "restore_environment"]

# initialize_distributed_hpu writes these; LOCAL_RANK left behind would make the next Trainer in this process
# believe an external launcher had started it.
_WRITTEN = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "ID", "HLS_MODULE_ID")


def initialize_hccl(world_size: int, global_rank: int, local_rank: int) -> dict[str, str | None]:
    """Register the ``"hccl"`` backend and set up this process's HPU environment.

    Returns:
        The previous values of the variables the SDK writes, for :func:`restore_environment`.
    """
    saved = {name: os.environ.get(name) for name in _WRITTEN}
    sdk.hccl_module().initialize_distributed_hpu(world_size=world_size, rank=global_rank, local_rank=local_rank)
    return saved


def restore_environment(saved: Mapping[str, str | None]) -> None:
    """Put back the variables saved by :func:`initialize_hccl`."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
