"""Joining HCCL as an HPU process: what ``initialize_distributed_hpu`` writes to the environment, undone on teardown."""

from __future__ import annotations

import os

from lightning_accel.habana import sdk

__all__ = ["HCCLEnvironment"]

# initialize_distributed_hpu writes these; LOCAL_RANK left behind would make the next Trainer in this process
# believe an external launcher had started it.
_WRITTEN = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "ID", "HLS_MODULE_ID")


class HCCLEnvironment:
    """Registers the ``"hccl"`` backend, sets up this process's HPU, and restores the environment afterwards."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] | None = None

    def initialize(self, world_size: int, global_rank: int, local_rank: int) -> None:
        """Import the SDK's ``hccl`` module (which registers the backend) and set up this rank's HPU."""
        if self._saved is None:
            self._saved = {name: os.environ.get(name) for name in _WRITTEN}
        sdk.hccl_module().initialize_distributed_hpu(world_size=world_size, rank=global_rank, local_rank=local_rank)

    def restore(self) -> None:
        """Put back the variables :meth:`initialize` changed."""
        if self._saved is None:
            return
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved = None
