"""The HPU part of a data-parallel strategy, written once for the Trainer, Fabric and DeepSpeed strategies.

Every multi-HPU strategy of lightning-accel is a Lightning strategy (``DDPStrategy`` of either tree, or
``DeepSpeedStrategy``) with this mixin in front. It owns what differs on Gaudi:

- the accelerator must be the HPU accelerator (a silent run on another device is refused);
- the root device is this process's HPU among ``parallel_devices``;
- the rendezvous: the SDK's ``MASTER_ADDR=localhost`` / ``MASTER_PORT=12345``, which it writes when it loads, are taken
  back out before Lightning's cluster environment reads them (the user's own values stay), so SLURM nodes meet on the
  first SLURM node and concurrent single-node jobs on free ports (:mod:`._distributed_env`);
- joining the process group: the SDK's ``initialize_distributed_hpu`` first (it registers ``"hccl"`` and sets up the
  rank's module), then ``init_process_group`` **without** ``device_id``. Lightning passes ``device_id=root_device``
  for any non-CPU device, but on Gaudi the root device is ``torch.device("hpu")`` without an index (the runtime
  gives each process its module), and torch refuses an index-less ``device_id`` ("Please use a device_id with
  index", ``torch.distributed.distributed_c10d.init_process_group``). SDK 1.24's wrapper turns it into ``hpu:0`` and
  binds the group to it, which makes torch 2.13 build a ``DeviceMesh``'s sub-groups with ``split_group``, which HCCL
  refuses; the archived lightning-habana left it out too;
- the backend: HCCL's where ``process_group_backend`` is None, the default of the Lightning constructors the HPU
  strategies take unchanged;
- DDP must not pin device ids;
- reductions with the operations HCCL supports (no average: the mean is sum / world size);
- teardown restores the environment variables the HPU set-up wrote;
- after a Trainer run that succeeded, the process group this strategy created ends when the process exits, before
  the interpreter's teardown, as Lightning does for NCCL (``_init_dist_connection``) but not for other backends: a
  group left to the interpreter's teardown can abort the process ("terminate called without an active exception")
  after a run that succeeded. Not after a failed run: ending a group whose peer died can crash the process
  (segmentation fault) before the rank watch has said which rank died;
- when Lightning launches the ranks itself, a rank that dies ends the run with a message naming it
  (:mod:`lightning_accel.core.rank_watch`).

The mixin imports no Lightning tree of its own, so it fits ``lightning.pytorch``, ``lightning.fabric`` and their
``pytorch_lightning`` twins.
"""

from __future__ import annotations

import atexit
import functools
import signal
from typing import Any

import torch

from lightning_accel.core import rank_watch

from . import sdk
from ._accelerator_check import RequiresHPUAccelerator
from ._collectives import all_reduce
from ._devices import parallel_root_device
from ._distributed_env import HCCLEnvironment, forget_sdk_rendezvous_defaults
from ._inductor_hint import explain_inductor_failure

__all__ = ["HCCLStrategyMixin"]


# Set when a run of this process failed: its group may have lost a peer, and must then be left alone at exit.
_run_failed = False


@functools.cache
def _end_process_group_at_exit() -> None:
    # Once per process, however many strategies join.
    atexit.register(_end_process_group)


def _end_process_group() -> None:
    if _run_failed:
        return
    # A Ctrl-C here would leave the group half-destroyed; the user's own destroy_process_group may have run first.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    finally:
        signal.signal(signal.SIGINT, previous)


class HCCLStrategyMixin(RequiresHPUAccelerator):
    """Mixin for a data-parallel strategy over HCCL; put it before the Lightning strategy it specialises.

    Example:
        >>> from lightning.pytorch.strategies import DDPStrategy
        >>> from lightning_accel.habana.distributed import HCCLStrategyMixin
        >>> class MyHPUStrategy(HCCLStrategyMixin, DDPStrategy):
        ...     pass
    """

    # Provided by the Lightning strategy the mixin is combined with.
    parallel_devices: list[torch.device] | None
    cluster_environment: Any
    _process_group_backend: str | None
    _timeout: Any

    @property
    def _hccl(self) -> HCCLEnvironment:
        hccl = self.__dict__.get("_hccl_environment")
        if hccl is None:
            hccl = self.__dict__["_hccl_environment"] = HCCLEnvironment()
        return hccl

    @property
    def process_group_backend(self) -> str:
        """The ``torch.distributed`` backend: the one given, or the SDK's (``"hccl"``) where none was."""
        return self._process_group_backend or sdk.distributed_backend()

    @property
    def root_device(self) -> torch.device:
        """This process's HPU: ``parallel_devices[local_rank]``."""
        return parallel_root_device(self.parallel_devices, self.local_rank)  # type: ignore[attr-defined]

    def setup_environment(self) -> None:
        """Start the rank watch, refuse a non-HPU accelerator, then set up as the Lightning strategy does.

        Raises:
            ConfigurationError: When the accelerator is not the HPU accelerator.
        """
        self._start_rank_watch()
        super().setup_environment()

    def _start_rank_watch(self) -> None:
        # This process's global rank, from the environment: the process group may not exist yet.
        environment = self.cluster_environment
        rank_watch.start_run(environment.node_rank() * self.num_processes + environment.local_rank())  # type: ignore[attr-defined]

    def _configure_launcher(self) -> None:
        # Refused here already, when the Trainer or Fabric is built: later, the ranks would have been launched.
        self._check_hpu_accelerator()
        # Before the launcher reads the cluster environment's address and port (and hands them to the ranks).
        forget_sdk_rendezvous_defaults()
        # Lightning's launcher, with a watcher that names a rank that dies (see lightning_accel.core.rank_watch).
        super()._configure_launcher()  # type: ignore[misc]
        rank_watch.watch_ranks(self._launcher)  # type: ignore[attr-defined]

    def _join_hccl(self, world_size: int, global_rank: int, local_rank: int) -> None:
        # Imported here: this module must not import a Lightning tree of its own at import time.
        from lightning_accel.core.compat import init_dist_connection

        self._hccl.initialize(world_size, global_rank, local_rank)
        # In a rank (or under SLURM, where nobody launched the ranks in this process) the SDK may have loaded since.
        forget_sdk_rendezvous_defaults()
        # Lightning leaves a group the user made alone, and so does the exit handler (see teardown).
        self.__dict__["_joined_group"] = not torch.distributed.is_initialized()
        init_dist_connection(self.cluster_environment, self.process_group_backend, timeout=self._timeout)

    def setup_distributed(self) -> None:
        """(Trainer) Join the ``"hccl"`` process group as Lightning's DDP does, without an index-less ``device_id``."""
        from lightning.fabric.utilities.seed import reset_seed

        reset_seed()
        self.set_world_ranks()  # type: ignore[attr-defined]
        self._process_group_backend = self._get_process_group_backend()  # type: ignore[attr-defined]
        self._join_hccl(self.world_size, self.global_rank, self.local_rank)  # type: ignore[attr-defined]

    def _setup_distributed(self) -> None:
        # (Fabric) As Lightning's Fabric DDP does, without an index-less device_id.
        self._set_world_ranks()  # type: ignore[attr-defined]
        self._process_group_backend = self._get_process_group_backend()  # type: ignore[attr-defined]
        self._join_hccl(self.world_size, self.global_rank, self.local_rank)  # type: ignore[attr-defined]

    def determine_ddp_device_ids(self) -> list[int] | None:
        """(Trainer) None: the HPU runtime gives each process one device, so DDP must not pin device ids."""
        return None

    def _determine_ddp_device_ids(self) -> list[int] | None:
        # (Fabric) The same rule under Fabric's name.
        return None

    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: Any = "mean") -> Any:
        """(Trainer) Reduce a tensor over all processes with ``"sum"``, ``"mean"``, ``"min"`` or ``"max"``.

        Raises:
            ConfigurationError: For any other ``reduce_op``.
        """
        return all_reduce(tensor, group=group, reduce_op=reduce_op)

    def all_reduce(self, tensor: Any, group: Any | None = None, reduce_op: Any = "mean") -> Any:
        """(Fabric) Reduce a tensor over all processes with ``"sum"``, ``"mean"``, ``"min"`` or ``"max"``.

        Raises:
            ConfigurationError: For any other ``reduce_op``.
        """
        return all_reduce(tensor, group=group, reduce_op=reduce_op)

    def on_exception(self, exception: BaseException) -> None:
        """(Trainer) Remember that the run failed: its process group is then not ended at exit (see the module).

        A failure inside Inductor gets what to do added to its message (``_inductor_hint``).
        """
        global _run_failed
        _run_failed = True
        explain_inductor_failure(exception)
        super().on_exception(exception)  # type: ignore[misc]

    def teardown(self) -> None:
        """Tear down as the Lightning strategy does, then undo the environment variables the HPU set-up wrote.

        After a run that did not fail, the process group this strategy created is ended when the process exits.
        """
        if self.__dict__.get("_joined_group") and not _run_failed:
            _end_process_group_at_exit()
        super().teardown()  # type: ignore[misc]
        self._hccl.restore()
        rank_watch.finish_run()
