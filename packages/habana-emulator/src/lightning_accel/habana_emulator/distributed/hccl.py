"""Emulation of ``habana_frameworks.torch.distributed.hccl``.

Importing the module does what importing the SDK's does (the SDK's ``__init__.py`` imports it on every load):
``initialize_distributed_hpu()`` runs (so ``MASTER_ADDR``/``MASTER_PORT`` default to ``localhost:12345`` unless the
ranks are all known), the ``"hccl"`` backend is registered with ``torch.distributed.Backend.register_backend`` for
``devices=["hpu"]``, and collectives are kept out of dynamo graphs. As on Gaudi, c10d's collective operators get
kernels on the HPU dispatch key and no function of ``torch.distributed`` is replaced (:mod:`._hccl_backend`: C++
kernels run gloo on zero-copy host aliases of the HPU tensors' memory, so ``torch.distributed.get_backend()`` returns
``"hccl"`` while the collectives are real). As HCCL, it reduces with ``MIN``, ``MAX``, ``SUM`` and ``PRODUCT`` only
(gaudi-pytorch-bridge 1.19.0 ``backend/helpers/collective_utils.cpp``).
"""

from __future__ import annotations

import os

import torch.distributed as dist

from .. import _load_effects, _not_emulated
from ..hpu._devices import HABANA_VISIBLE_MODULES_VAR, HLS_MODULE_ID_VAR
from ..hpu._devices import visible_device_count as _visible_device_count
from ._hccl_backend import ProcessGroupHCCL
from ._hccl_backend import create_process_group as _create_process_group_hccl

__all__ = ["HABANA_VISIBLE_MODULES_VAR", "HLS_MODULE_ID_VAR", "ProcessGroupHCCL", "initialize_distributed_hpu"]

_BACKEND_NAME = "hccl"

_MPI_TO_TORCH = {
    "OMPI_COMM_WORLD_LOCAL_RANK": "LOCAL_RANK",
    "OMPI_COMM_WORLD_SIZE": "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK": "RANK",
}


def _register() -> None:
    if _BACKEND_NAME in dist.Backend.backend_list:
        return
    # As the SDK (distributed/hccl/__init__.py:130-139): the backend serves "hpu" tensors only, and its creator takes
    # the extended options. c10d's operators have their HPU kernels from the C++ device, registered when it loads, as
    # the SDK's bridge registers its own when its library loads.
    dist.Backend.register_backend(_BACKEND_NAME, _create_process_group_hccl, extended_api=True, devices=["hpu"])


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
