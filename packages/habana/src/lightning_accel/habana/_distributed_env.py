"""Joining HCCL as an HPU process, and undoing what that writes to the environment when a strategy tears down.

Loading the Gaudi SDK runs ``initialize_distributed_hpu()``, which sets ``MASTER_ADDR=localhost`` and
``MASTER_PORT=12345`` when they are unset and ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` are not all set
(gaudi-pytorch-bridge 1.19.0 ``distributed/hccl/__init__.py:60-81,113``; in eager mode the SDK loads at ``import
torch``). Lightning's ``SLURMEnvironment`` and ``LightningEnvironment`` prefer these variables to their own choice (the
first SLURM node, a free port), so every SLURM node would rendezvous on its own ``localhost`` and two jobs on one host
on port 12345. :func:`forget_sdk_rendezvous_defaults` takes them back out before a strategy reads them, unless the
user set them: lightning-accel-core records both variables when the interpreter starts, before any SDK can load.

Lightning-free, so that the Trainer and Fabric strategies of both trees, and other HPU strategies (DeepSpeed), share
it; it is public as :class:`lightning_accel.habana.distributed.HCCLEnvironment`.
"""

from __future__ import annotations

import os
import sys

from . import sdk

__all__ = ["SDK_RENDEZVOUS_DEFAULTS", "HCCLEnvironment", "forget_sdk_rendezvous_defaults", "sdk_rendezvous_defaults"]

#: What the SDK's initialize_distributed_hpu() writes when the variables are unset.
SDK_RENDEZVOUS_DEFAULTS = {"MASTER_ADDR": "localhost", "MASTER_PORT": "12345"}

# initialize_distributed_hpu writes these; LOCAL_RANK left behind would make the next Trainer in this process
# believe an external launcher had started it.
_WRITTEN = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "ID", "HLS_MODULE_ID")


def _at_start() -> dict[str, str | None] | None:
    autoload = sys.modules.get("_lightning_accel_autoload")  # imported at interpreter start by the core's .pth
    if autoload is None or not hasattr(autoload, "environment_at_start"):
        return None
    at_start: dict[str, str | None] = autoload.environment_at_start()
    return at_start


def sdk_rendezvous_defaults() -> list[str]:
    """The rendezvous variables whose value in this process is the SDK's default, not the user's.

    A variable is the SDK's when it holds the SDK's default now and was unset when the interpreter started; without
    the start-up record (``python -S``, no ``.pth`` processing) a value equal to the default is taken for the SDK's.
    """
    at_start = _at_start()
    invented = []
    for name, default in SDK_RENDEZVOUS_DEFAULTS.items():
        if os.environ.get(name) != default:
            continue
        if at_start is None or at_start.get(name) is None:
            invented.append(name)
    return invented


def forget_sdk_rendezvous_defaults() -> None:
    """Take the SDK's ``MASTER_ADDR=localhost`` / ``MASTER_PORT=12345`` out of the environment (the user's stay).

    Then Lightning's cluster environment chooses as it would without the SDK: the first node of ``SLURM_NODELIST``
    under SLURM, a free port for a single-node run. Nothing changes for variables the user set.
    """
    for name in sdk_rendezvous_defaults():
        os.environ.pop(name, None)


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
