"""The emulated ``"hccl"`` c10d backend: a registered backend, as the SDK's, that runs gloo on host views.

The SDK registers ``"hccl"`` with ``torch.distributed.Backend.register_backend`` (bcc5172
``distributed/hccl/__init__.py:130-139``) and its C++ bridge registers c10d's collective operators
(``c10d::allreduce_`` ...) on the HPU dispatch key; each of those kernels hands the tensors to the group's HPU backend
(gaudi-pytorch-bridge 1.19.0 ``distributed/hccl/process_group_hccl_ops.cpp``, ``TORCH_LIBRARY_IMPL(c10d, HPU, m)``
blocks). Nothing of ``torch.distributed`` is replaced. The emulator does the same:

* :func:`create_process_group` is the registered creator; its :class:`ProcessGroupHCCL` serves the ``"hpu"`` device
  only, so a collective of an ``"hccl"`` group on host tensors fails in torch's own words ("No backend type associated
  with device type cpu"), as on Gaudi.
* :func:`register_hpu_kernels` registers a kernel on the HPU key for every c10d collective operator. Every path reaches
  them: ``torch.distributed``'s functions, functional collectives (``torch.ops._c10d_functional``), DDP's C++
  reducer, FSDP. The kernel refuses the reduce operations HCCL lacks (``AVG``, ``PREMUL_SUM``, the bitwise ones), then
  runs the operator's host kernel on zero-copy host views of the HPU tensors' memory, with a private host group whose
  CPU backend is the same gloo object. The work it returns completes with the HPU tensors, as HCCL's does.
"""

from __future__ import annotations

import functools
import threading
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.utils import _pytree as pytree

from .. import _native

__all__ = ["HCCL_REDUCE_OPS", "ProcessGroupHCCL", "check_reduce_op", "create_process_group", "register_hpu_kernels"]

# The reduce operations HCCL implements (gaudi-pytorch-bridge 1.19.0 backend/helpers/collective_utils.cpp); every
# other ReduceOp is refused for an "hccl" group, as the SDK refuses it.
HCCL_REDUCE_OPS = ("MIN", "MAX", "SUM", "PRODUCT")

_HPU = torch.device("hpu")
_CPU = torch.device("cpu")


class ProcessGroupHCCL(dist.ProcessGroupGloo):
    """The backend of an ``"hccl"`` group's ``"hpu"`` device: what ``group._get_backend(torch.device("hpu"))`` returns.

    The SDK's is a C++ class of its HCCL library (``_hccl_eager_C`` / ``_hccl_lazy_C``), made with
    ``(store, rank, size, group_id)``. The emulator's is gloo, which the HPU kernels of c10d's operators run on host
    views of the HPU tensors' memory; it keeps ``group_id``.

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


def check_reduce_op(op: Any) -> None:
    """Refuse a reduce operation HCCL does not implement (``None`` passes).

    Raises:
        ValueError: naming the operation, the ones HCCL has, and how to average instead.
    """
    if op is None:
        return
    if isinstance(op, str):
        name = op
    else:
        kind = getattr(op, "op", op)  # a ReduceOp object (PREMUL_SUM carries a factor) or its RedOpType
        name = getattr(kind, "name", None) or str(kind).rpartition(".")[2]
    if name not in HCCL_REDUCE_OPS:
        raise ValueError(
            f"op=ReduceOp.{name} is not supported by the 'hccl' backend: HCCL reduces with "
            f"{', '.join('ReduceOp.' + n for n in HCCL_REDUCE_OPS)} only. For an average, reduce with "
            "ReduceOp.SUM and divide by the world size."
        )


_library: Any = None


def register_hpu_kernels() -> None:
    """Register the HPU kernel of every c10d operator that has a host kernel (once per process)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("c10d", "IMPL")
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("c10d::") or not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"):
            continue
        packet = getattr(torch.ops.c10d, name[len("c10d::") :], None)
        if packet is None:
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            library.impl(op, functools.partial(_run_on_host_views, op), "HPU")
    _library = library


def _hccl_backend(group: Any) -> ProcessGroupHCCL:
    backend = group._get_backend(_HPU)
    if not isinstance(backend, ProcessGroupHCCL):
        # Another backend registered for "hpu" (only the SDK's HCCL is meant to serve it): nothing to run it with.
        raise RuntimeError(
            f"The HPU backend of process group {group.group_name!r} is {type(backend).__name__}, not the 'hccl' "
            "backend: on HPUs, create the group with backend='hccl'."
        )
    return backend


def _script_class(value: Any) -> str:
    # c10d's custom classes reach a Python kernel boxed, as torch.ScriptObject.
    if isinstance(value, torch.ScriptObject):
        return str(value._type().qualified_name()).rpartition(".")[2]
    return ""


def _reduce_op_name(boxed: Any) -> str:
    return str(dist.ReduceOp.RedOpType(int(boxed.op())).name)


class _HostViews:
    """The host views one operator call hands gloo, and the HPU tensors they view.

    Both are released once the call has returned and its work's future has mapped its value: after that nothing of
    the call holds an HPU tensor, so its memory is free when the caller drops it (not when gloo's worker thread or the
    garbage collector gets to it).
    """

    def __init__(self, backend: ProcessGroupHCCL) -> None:
        self._backend = backend
        self._originals: dict[int, torch.Tensor] = {}
        self._views: list[torch.Tensor] = []  # each view (and so its _cdata) lives while its HPU tensor is looked up
        self._users = 1  # the call itself; a work's future adds one
        self._lock = threading.Lock()

    def to_host(self, value: Any) -> Any:
        if _script_class(value) == "ProcessGroup":
            return self._backend._host_group.boxed()
        if not isinstance(value, torch.Tensor):
            return value
        view = _native.backing_alias(value)
        self.alias(view, value)
        return view

    def alias(self, view: torch.Tensor, tensor: torch.Tensor) -> None:
        self._originals[view._cdata] = tensor
        self._views.append(view)

    def to_device(self, value: Any) -> Any:
        return self._originals.get(value._cdata, value) if isinstance(value, torch.Tensor) else value

    def use(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users:
                return
            self._originals.clear()
            self._views.clear()


def _run_on_host_views(op: Any, *args: Any, **kwargs: Any) -> Any:
    leaves = pytree.tree_leaves((args, kwargs))
    groups = [leaf for leaf in leaves if _script_class(leaf) == "ProcessGroup"]
    if len(groups) != 1:
        raise RuntimeError(f"{op}: expected one process group among its arguments, found {len(groups)}")
    backend = _hccl_backend(dist.ProcessGroup.unbox(groups[0]))
    for leaf in leaves:
        if _script_class(leaf) == "ReduceOp":
            check_reduce_op(_reduce_op_name(leaf))
        elif isinstance(leaf, torch.Tensor) and leaf.device.type != "hpu":
            # What torch says when an "hccl" group meets a host tensor alone (an HPU one sent the call here).
            raise RuntimeError(f"No backend type associated with device type {leaf.device.type}")
    views = _HostViews(backend)
    if op is torch.ops.c10d._allgather_base_.default:
        output = args[0]
        args = _rows_per_rank(*args)
    args, kwargs = pytree.tree_map_only((torch.Tensor, torch.ScriptObject), views.to_host, (args, kwargs))
    if op is torch.ops.c10d._allgather_base_.default:
        views.alias(args[0], output)  # the caller's tensor, not the row view gloo was given
    try:
        result = op(*args, **kwargs)
        return pytree.tree_map_only(
            (torch.Tensor, torch.ScriptObject),
            lambda value: _on_device(value, views) if _script_class(value) == "Work" else views.to_device(value),
            result,
        )
    finally:
        views.release()


def _on_device(boxed: Any, views: _HostViews) -> Any:
    # gloo's future completes with the host views; HCCL's with the HPU tensors: a work over a future that maps them.
    work = dist.Work.unbox(boxed)
    try:
        future = work.get_future()
    except RuntimeError:  # a work without a future (gloo's send/recv): nothing to map, its result is in memory
        return boxed
    views.use()

    def on_device(done: Any) -> Any:
        try:
            return pytree.tree_map_only(torch.Tensor, views.to_device, done.value())
        finally:
            views.release()

    # Future.then, not a Python future completed by hand: when gloo fails (a peer died, a timeout), the callback's
    # exception fails the mapped future in C++, as HCCL's work fails. A Python future's set_exception completes it
    # *successfully* with the exception object as its value, which DDP's reducer (C++, on the autograd thread) takes
    # for the reduced tensors and reads past the end of an empty tensor list: a segmentation fault before anything
    # could say which rank died. The C++ callback that holds the mapped future is gone once gloo's worker has run it.
    mapped = future.then(on_device)
    # A C++ work (no Python object has to outlive the call) whose wait() raises gloo's error, as gloo's and HCCL's
    # do: torch's work over a future (_create_work_from_future) returns from wait() as if the collective succeeded.
    return _native.device().device_work(work, mapped)


def _rows_per_rank(output: torch.Tensor, input: torch.Tensor, group: Any, *rest: Any) -> tuple[Any, ...]:
    # all_gather_into_tensor fills the output rank after rank in memory, whatever its shape (SyncBatchNorm gathers
    # into shape (1, world * n)), as HCCL and NCCL do; gloo splits the output along dimension 0 instead, so it gets
    # a view with one row per rank over the same memory.
    world = output.numel() // max(input.numel(), 1)
    if output.is_contiguous() and world > 0 and output.dim() > 0 and output.shape[0] != world:
        output = output.view(world, -1)
        input = input.reshape(1, -1)
    return (output, input, group, *rest)
