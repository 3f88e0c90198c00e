"""Joining HCCL as an HPU process, and undoing what that writes to the environment when a strategy tears down.

Lightning-free, so that the Trainer and Fabric strategies of both trees, and other HPU strategies (DeepSpeed), share
it; it is public as :class:`lightning_accel.habana.distributed.HCCLEnvironment`.
"""

from __future__ import annotations

import os

from . import sdk

__all__ = ["HCCLEnvironment"]

# initialize_distributed_hpu writes these; LOCAL_RANK left behind would make the next Trainer in this process
# believe an external launcher had started it.
_WRITTEN = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "ID", "HLS_MODULE_ID")


class HCCLEnvironment:
    """Registers the ``"hccl"`` backend, sets up this process's HPU, and restores the environment afterwards.

    A strategy holds one, calls :meth:`initialize` before it joins the process group and :meth:`restore` when it
    tears down.

    Example:
        >>> from lightning_accel.habana.distributed import HCCLEnvironment
        >>> hccl = HCCLEnvironment()
        >>> hccl.initialize(world_size=2, global_rank=0, local_rank=0)  # doctest: +SKIP
        >>> hccl.restore()
    """

    def __init__(self) -> None:
        self._saved: dict[str, str | None] | None = None

    def initialize(self, world_size: int, global_rank: int, local_rank: int) -> None:
        """Import the SDK's ``hccl`` module (which registers the backend) and set up this rank's HPU.

        Args:
            world_size: The number of processes.
            global_rank: This process's rank among all processes.
            local_rank: This process's rank on its node.

        Raises:
            DeviceUnavailableError: When neither the Habana SDK nor its emulator can be used.
        """
        # Saved only once: a second set-up before teardown must not take the first one's values for the originals.
        if self._saved is None:
            self._saved = {name: os.environ.get(name) for name in _WRITTEN}
        sdk.hccl_module().initialize_distributed_hpu(world_size=world_size, rank=global_rank, local_rank=local_rank)

    def restore(self) -> None:
        """Put back the variables :meth:`initialize` changed; nothing to do when it has not run since."""
        if self._saved is None:
            return
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved = None
