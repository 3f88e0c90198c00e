"""The emulated ``"hccl"`` c10d backend: a registered backend, as the SDK's, that runs gloo on host aliases.

The SDK registers ``"hccl"`` with ``torch.distributed.Backend.register_backend`` (bcc5172
``distributed/hccl/__init__.py:130-139``) and its C++ bridge registers c10d's collective operators
(``c10d::allreduce_`` ...) on the HPU dispatch key; each of those kernels hands the tensors to the group's HPU backend
(gaudi-pytorch-bridge 1.19.0 ``distributed/hccl/process_group_hccl_ops.cpp``, ``TORCH_LIBRARY_IMPL(c10d, HPU, m)``
blocks). Nothing of ``torch.distributed`` is replaced. The emulator does the same:

* :func:`create_process_group` is the registered creator; its :class:`ProcessGroupHCCL` serves the ``"hpu"`` device
  only, so a collective of an ``"hccl"`` group on host tensors fails in torch's own words ("No backend type associated
  with device type cpu"), as on Gaudi.
* the C++ device registers a kernel on the HPU key for every c10d collective operator when it loads
  (``emulated_hpu/csrc/distributed/HostCollectives.cpp``), as the bridge's library does. Every path reaches them:
  ``torch.distributed``'s functions, functional collectives (``torch.ops._c10d_functional``), DDP's C++ reducer, FSDP.
  The kernel refuses the reduce operations HCCL lacks (``AVG``, ``PREMUL_SUM``, the bitwise ones) with a
  ``ValueError``, then runs the operator's host kernel on zero-copy host aliases of the HPU tensors' memory, with the
  private host group of :class:`ProcessGroupHCCL`, whose CPU backend is the same gloo object. The work it returns
  completes with HPU tensors over the caller's memory, as HCCL's does with the caller's tensors. Nothing of it is
  Python: gloo's worker thread never takes the GIL for a collective, so a process whose last statement is a
  collective exits cleanly.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .. import _native

__all__ = ["ProcessGroupHCCL", "create_process_group"]

_CPU = torch.device("cpu")


class ProcessGroupHCCL(dist.ProcessGroupGloo):
    """The backend of an ``"hccl"`` group's ``"hpu"`` device: what ``group._get_backend(torch.device("hpu"))`` returns.

    The SDK's is a C++ class of its HCCL library (``_hccl_eager_C`` / ``_hccl_lazy_C``), made with
    ``(store, rank, size, group_id)``. The emulator's is gloo, which the HPU kernels of c10d's operators run on host
    aliases of the HPU tensors' memory; it keeps ``group_id``.

    Example:
        >>> import torch.distributed as dist
        >>> dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)  # doctest: +SKIP
        >>> type(dist.group.WORLD._get_backend(torch.device("hpu"))).__name__  # doctest: +SKIP
        'ProcessGroupHCCL'
    """

    def __init__(
        self, store: Any, rank: int, size: int, group_id: str = "", timeout: timedelta = timedelta(minutes=30)
    ) -> None:
        super().__init__(store, rank, size, timeout)
        self.group_id = group_id
        # gloo's host kernels ask the group they are given for its CPU backend: a private group of this process
        # answers with this same gloo object. The user's group keeps "hpu" as its only device.
        host_group = dist.ProcessGroup(store, rank, size)
        host_group._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
        host_group._register_backend(_CPU, dist.ProcessGroup.BackendType.GLOO, self)
        self._host_group = host_group
        # The HPU kernels (C++) find the host group from the backend; they hold both weakly, so this object keeps them.
        _native.device().register_hccl_backend(self, host_group)

    @property
    def supports_splitting(self) -> bool:
        """False, as the SDK's: torch never splits a group from an ``"hccl"`` one (gloo's says True)."""
        # The SDK's backend (distributed/hccl/process_group_hccl_base.hpp) keeps c10d's default: so torch does not
        # connect it eagerly for a bound device_id, new_group never splits from it, and split_group refuses it.
        return False


# torch keeps a group's backend in C++; pybind hands back the same Python object (so ProcessGroupHCCL's answers, and
# its host group) only while that object lives. Each is kept while torch knows its group's name.
_live: dict[str, ProcessGroupHCCL] = {}


def create_process_group(backend_opts: Any, pg_opts: Any) -> ProcessGroupHCCL:
    """The creator registered for ``"hccl"`` (``extended_api=True``, as the SDK's ``_create_process_group_hccl``)."""
    known = set(dist.distributed_c10d._world.pg_names.values())
    for name in [name for name in _live if name not in known]:
        del _live[name]
    backend = ProcessGroupHCCL(
        backend_opts.store,
        backend_opts.group_rank,
        backend_opts.group_size,
        backend_opts.group_id,
        backend_opts.timeout,
    )
    # As torch does for its own gloo groups: ranks agree on the group's first sequence number through the store.
    backend._set_sequence_number_for_group()
    _live[backend_opts.group_id] = backend
    return backend
