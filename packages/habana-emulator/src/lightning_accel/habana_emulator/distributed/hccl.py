"""Emulation of ``habana_frameworks.torch.distributed.hccl``.

Importing the module does what importing the SDK's does (the SDK's ``__init__.py`` imports it on every load):
``initialize_distributed_hpu()`` runs (so ``MASTER_ADDR``/``MASTER_PORT`` default to ``localhost:12345`` unless the
ranks are all known), the ``"hccl"`` backend is registered with ``torch.distributed``, and collectives are kept out of
dynamo graphs. The emulated
backend runs gloo on zero-copy host views of the HPU tensors' memory (the C++ device's ``backing_alias``), so
``torch.distributed.get_backend()`` returns ``"hccl"`` while the collectives are real. As HCCL, it reduces with
``MIN``, ``MAX``, ``SUM`` and ``PRODUCT`` only (gaudi-pytorch-bridge 1.19.0 ``backend/helpers/collective_utils.cpp``).
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import weakref
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .. import _load_effects, _native, _not_emulated
from ..hpu._devices import HABANA_VISIBLE_MODULES_VAR, HLS_MODULE_ID_VAR
from ..hpu._devices import visible_device_count as _visible_device_count

__all__ = ["HABANA_VISIBLE_MODULES_VAR", "HLS_MODULE_ID_VAR", "ProcessGroupHCCL", "initialize_distributed_hpu"]

_BACKEND_NAME = "hccl"

_MPI_TO_TORCH = {
    "OMPI_COMM_WORLD_LOCAL_RANK": "LOCAL_RANK",
    "OMPI_COMM_WORLD_SIZE": "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK": "RANK",
}


# The reduce operations HCCL implements; every other ``ReduceOp`` (``AVG``, ``PREMUL_SUM``, the bitwise ones) is
# refused for an "hccl" group, as the SDK refuses it.
_HCCL_REDUCE_OPS = ("MIN", "MAX", "SUM", "PRODUCT")


class ProcessGroupHCCL(dist.ProcessGroupGloo):
    """The process group of the ``"hccl"`` backend: what ``group._get_backend(torch.device("hpu"))`` returns.

    The SDK's is a C++ class of its HCCL library (``_hccl_eager_C`` / ``_hccl_lazy_C``; at bcc5172 the module binds
    it by that name in either mode), made with ``(store, rank, size, group_id)``. The emulator's is gloo, which runs
    the collectives on host views of the HPU tensors' memory (see the module's docstring); it keeps ``group_id``.
    """

    def __init__(
        self, store: Any, rank: int, size: int, group_id: str = "", timeout: timedelta = timedelta(minutes=30)
    ) -> None:
        super().__init__(store, rank, size, timeout)
        self.group_id = group_id

    @property
    def supports_splitting(self) -> bool:
        """False, as the SDK's: torch never splits a group from an ``"hccl"`` one (gloo's says True)."""
        # The SDK's backend (distributed/hccl/process_group_hccl_base.hpp) keeps c10d's default: so torch does not
        # connect it eagerly for a bound device_id, new_group never splits from it, and split_group (DeviceMesh's
        # way on a group bound with init_process_group(device_id=...)) refuses it.
        return False


# torch asks a group's backend by identity (pybind hands back the live Python object, else a new plain gloo one), so
# each group's backend object is kept as long as its group is: then torch reads ProcessGroupHCCL's answers.
_backends: weakref.WeakKeyDictionary[Any, list[ProcessGroupHCCL]] = weakref.WeakKeyDictionary()
_being_made: list[ProcessGroupHCCL] = []


def _create_process_group(backend_opts: Any, pg_opts: Any) -> Any:
    timeout: timedelta = backend_opts.timeout
    backend = ProcessGroupHCCL(
        backend_opts.store, backend_opts.group_rank, backend_opts.group_size, backend_opts.group_id, timeout
    )
    _being_made.append(backend)
    return backend


def _register() -> None:
    if _BACKEND_NAME in dist.Backend.backend_list:
        return
    # As the SDK (distributed/hccl/__init__.py:120): the backend serves "hpu" tensors only.
    dist.Backend.register_backend(_BACKEND_NAME, _create_process_group, extended_api=True, devices=["hpu"])
    _serve_backing_tensors()
    _refuse_host_tensors()
    _run_c10d_ops_on_host_views()


_c10d_library: Any = None


def _run_c10d_ops_on_host_views() -> None:
    # torch's own C++ code calls a process group's collectives without the Python functions (DDP's parameter check,
    # bucket all-reduces and broadcasts): they reach c10d's operators (c10d::allgather_ ...) on the HPU dispatch key.
    # These kernels hand gloo host views of the same memory (nested tensor lists included) and give back the HPU
    # tensors the operator returns, as on Gaudi the bridge's kernels hand HCCL the device memory.
    global _c10d_library
    if _c10d_library is not None:
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
            library.impl(op, functools.partial(_on_host_views, op), "HPU")
    _c10d_library = library


def _on_host_views(op: Any, *args: Any, **kwargs: Any) -> Any:
    originals: dict[int, torch.Tensor] = {}

    def alias(tensor: torch.Tensor) -> torch.Tensor:
        view = _native.backing_alias(tensor)
        originals[id(view)] = tensor
        return view

    args, kwargs = torch.utils._pytree.tree_map_only(torch.Tensor, alias, (args, kwargs))
    if op is torch.ops.c10d._allgather_base_.default:
        args = _rows_per_rank(*args)
    result = op(*args, **kwargs)
    return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: originals.get(id(t), t), result)


def _rows_per_rank(output: torch.Tensor, input: torch.Tensor, group: Any, *rest: Any) -> tuple[Any, ...]:
    # all_gather_into_tensor fills the output rank after rank in memory, whatever its shape (SyncBatchNorm gathers
    # into shape (1, world * n)), as HCCL and NCCL do; gloo splits the output along dimension 0 instead, so it gets
    # a view with one row per rank over the same memory.
    world = output.numel() // max(input.numel(), 1)
    if output.is_contiguous() and world > 0 and output.dim() > 0 and output.shape[0] != world:
        output = output.view(world, -1)
        input = input.reshape(1, -1)
    return (output, input, group, *rest)


def _is_hccl(group: Any) -> bool:
    try:
        return bool(dist.get_backend(group) == _BACKEND_NAME)  # a custom backend's own name says "custom"
    except (RuntimeError, ValueError):
        return False


def _serve_backing_tensors() -> None:
    # A collective on HPU tensors reaches the process group's operator (c10d::allreduce_ ...) on the HPU dispatch key,
    # where the C++ device runs the host's kernel on zero-copy host views of the same memory: that kernel asks the
    # group for its CPU backend. So an "hccl" group also answers the CPU, inside; what torch reports as its
    # capability stays "hpu", as on Gaudi.
    c10d = dist.distributed_c10d
    create = c10d._new_process_group_helper

    @functools.wraps(create)
    def _new_process_group_helper(*args: Any, **kwargs: Any) -> Any:
        _being_made.clear()
        try:
            made = create(*args, **kwargs)
            group = made[0]
            if _is_hccl(group):
                _backends[group] = list(_being_made)
                backend = group._get_backend(torch.device("hpu"))
                group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, backend)
        finally:
            _being_made.clear()
        return made

    c10d._new_process_group_helper = _new_process_group_helper


_staging = threading.local()


def _refuse_host_tensors() -> None:
    # On Gaudi a collective of an "hccl" group on a host tensor finds no backend (the backend serves "hpu" only) and
    # torch says so; the emulated group serves the backing device inside, so it refuses such tensors here, with
    # torch's text. The public collectives are checked; the emulated device's own calls come from below them. The
    # object collectives (broadcast_object_list, ...) stage their bytes in tensors of the group's device, the HPU on
    # Gaudi; here the backing device holds them, so inside those the check is off.
    c10d = dist.distributed_c10d
    for name in _COLLECTIVES:
        original = getattr(c10d, name, None)
        if original is None:
            continue
        signature = inspect.signature(original)

        def checked(*args: Any, __original: Any = original, __signature: Any = signature, **kwargs: Any) -> Any:
            if not getattr(_staging, "depth", 0) and dist.is_initialized():
                bound = __signature.bind_partial(*args, **kwargs)
                if _is_hccl(bound.arguments.get("group")):
                    _check_reduce_op(bound.arguments.get("op"))
                    values = [v for k, v in bound.arguments.items() if k not in ("group", "op")]
                    for value in torch.utils._pytree.tree_leaves(values):
                        if isinstance(value, torch.Tensor) and value.device.type != "hpu":
                            raise RuntimeError(f"No backend type associated with device type {value.device.type}")
                    # gloo runs on host views of the HPU tensors' memory: results land in the HPU tensors.
                    args, kwargs = torch.utils._pytree.tree_map_only(
                        torch.Tensor, _native.backing_alias, (args, kwargs)
                    )
            return __original(*args, **kwargs)

        _replace(c10d, name, original, checked)
    for name in _REDUCE_OP_ONLY:
        original = getattr(c10d, name, None)
        if original is None:
            continue
        signature = inspect.signature(original)

        def op_checked(*args: Any, __original: Any = original, __signature: Any = signature, **kwargs: Any) -> Any:
            if dist.is_initialized():
                bound = __signature.bind_partial(*args, **kwargs).arguments
                if _is_hccl(bound.get("group")):
                    _check_reduce_op(bound.get("op"))
            return __original(*args, **kwargs)

        _replace(c10d, name, original, op_checked)
    for name in _OBJECT_COLLECTIVES:
        original = getattr(c10d, name, None)
        if original is None:
            continue

        def staged(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            _staging.depth = getattr(_staging, "depth", 0) + 1
            try:
                return __original(*args, **kwargs)
            finally:
                _staging.depth -= 1

        _replace(c10d, name, original, staged)


def _check_reduce_op(op: Any) -> None:
    if op is None:
        return
    name = getattr(op, "name", None) or str(op).rpartition(".")[2]
    if name not in _HCCL_REDUCE_OPS:
        raise ValueError(
            f"op=ReduceOp.{name} is not supported by the 'hccl' backend: HCCL reduces with "
            f"{', '.join('ReduceOp.' + n for n in _HCCL_REDUCE_OPS)} only. For an average, reduce with "
            "ReduceOp.SUM and divide by the world size."
        )


def _replace(c10d: Any, name: str, original: Any, wrapper: Any) -> None:
    # Not what the SDK does: it registers a c10d backend (ProcessGroupHCCL) and leaves torch.distributed's functions
    # alone. Replacing them makes every collective of the process differ from Gaudi (functional collectives bypass
    # the check; async works return host tensors); issue 48 replaces this with a registered backend.
    functools.update_wrapper(wrapper, original)
    setattr(c10d, name, wrapper)
    if getattr(dist, name, None) is original:
        setattr(dist, name, wrapper)


_OBJECT_COLLECTIVES = (
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "recv_object_list",
    "scatter_object_list",
    "send_object_list",
)
# Checked for the reduce operation only: DeepSpeed, which the tests run on its CPU accelerator beside the emulated
# HPU, hands these its host tensors (on Gaudi, HPU tensors).
_REDUCE_OP_ONLY = (
    "_reduce_scatter_base",
    "all_reduce_coalesced",
    "reduce_scatter_single",  # torch 2.13: what FSDP2 reduces its gradients with
)
_COLLECTIVES = (
    "all_gather",
    "all_gather_into_tensor",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "gather",
    "irecv",
    "isend",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "send",
)


def _set_module_id(local_rank: int, world_size: int) -> None:
    # As in the SDK: single-process runs and unknown local ranks leave the module choice to the runtime.
    if HLS_MODULE_ID_VAR in os.environ or local_rank == -1 or world_size == 1:
        return
    visible = _visible_device_count()
    if local_rank >= visible:
        raise AssertionError(
            "There is not enough devices available for training. Please verify if "
            f"{HABANA_VISIBLE_MODULES_VAR} is set correctly. (local_rank={local_rank}, visible emulated HPUs="
            f"{visible}; set LIGHTNING_ACCEL_EMULATED_DEVICES or {HABANA_VISIBLE_MODULES_VAR} to expose more.)"
        )
    modules = os.environ.get(HABANA_VISIBLE_MODULES_VAR)
    if modules and modules.strip():
        os.environ[HLS_MODULE_ID_VAR] = [m.strip() for m in modules.split(",") if m.strip()][local_rank]
    else:
        os.environ[HLS_MODULE_ID_VAR] = str(local_rank)


def initialize_distributed_hpu(
    world_size: int | None = None, rank: int | None = None, local_rank: int | None = None
) -> tuple[int, int, int]:
    """Set up the environment of a distributed HPU process and return ``(world_size, rank, local_rank)``.

    With all three arguments given they are written to ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK``; otherwise the
    values come from the environment (torchrun variables, or Open MPI's ``OMPI_COMM_WORLD_*``), and unless
    ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` were all set, ``MASTER_ADDR`` / ``MASTER_PORT`` default to
    ``localhost:12345``. Sets ``HLS_MODULE_ID`` to the module of the local rank and ``ID``
    to the global rank.

    Raises:
        AssertionError: "There is not enough devices available for training..." when the local rank has no visible
            module (the SDK's own error type and text).
    """
    if world_size is not None and rank is not None and local_rank is not None:
        os.environ["WORLD_SIZE"] = str(world_size)
        os.environ["RANK"] = str(rank)
        os.environ["LOCAL_RANK"] = str(local_rank)
    elif not all(name in os.environ for name in _MPI_TO_TORCH.values()):
        # _setup_environment_from_mpi (distributed/hccl/__init__.py:60-81): nothing when the ranks are all known;
        # otherwise Open MPI's ranks, and the single-node rendezvous defaults.
        if all(name in os.environ for name in _MPI_TO_TORCH):
            for mpi_name, torch_name in _MPI_TO_TORCH.items():
                os.environ[torch_name] = os.environ[mpi_name]
        os.environ.setdefault("MASTER_ADDR", "localhost")
        os.environ.setdefault("MASTER_PORT", "12345")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    global_rank = int(os.environ.get("RANK", "-1"))
    local = int(os.environ.get("LOCAL_RANK", "-1"))
    _set_module_id(local, world)
    if global_rank != -1:
        os.environ["ID"] = str(global_rank)
    return world, global_rank, local


# What importing the SDK's hccl module does (distributed/hccl/__init__.py:113-165): set up the environment from
# torchrun's or Open MPI's variables (MASTER_ADDR/MASTER_PORT defaulted when the ranks are not all known), register
# the backend, and keep collectives out of dynamo graphs.
initialize_distributed_hpu()
_register()
_load_effects.disallow_collectives_in_graph()
_not_emulated.provide(globals(), "habana_frameworks.torch.distributed.hccl")
