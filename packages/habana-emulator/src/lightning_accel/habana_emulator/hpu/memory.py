"""Memory statistics of the emulated ``habana_frameworks.torch.hpu``.

The keys and meanings follow the SDK's memory-stats API. The values come from the device layer's exact accounting
of the storages of ``"hpu"`` tensors (see ``..device``), on the CPU and the CUDA backing alike. Each backing storage
is its own allocation (the emulator has no pool between the tensors and the backing allocator), so the "system"
counters equal the allocation counters.
"""

from __future__ import annotations

import sys
import warnings

import torch

from .. import _not_emulated
from ._devices import _lazy_init

__all__ = [
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
]

# The SDK's memory module binds its hpu package (`import habana_frameworks.torch.hpu as hpu`), partly initialised here.
hpu = sys.modules[__name__.rpartition(".")[0]]

_MEMORY_STAT_KEYS = (
    "Limit",
    "InUse",
    "MaxInUse",
    "NumAllocs",
    "NumFrees",
    "ActiveAllocs",
    "MaxAllocSize",
    "TotalSystemAllocs",
    "TotalSystemFrees",
    "TotalActiveAllocs",
)

Device = int | str | torch.device | None


def memory_stats(device: Device = None) -> dict[str, int]:
    """The ten memory statistics of an HPU, in bytes (sizes) and counts.

    Keys: ``Limit``, ``InUse``, ``MaxInUse``, ``NumAllocs``, ``NumFrees``, ``ActiveAllocs``, ``MaxAllocSize``,
    ``TotalSystemAllocs``, ``TotalSystemFrees``, ``TotalActiveAllocs``.
    """
    from .._device import memory_snapshot

    _lazy_init("hpu.memory_stats()")  # as the SDK's hpu.init() at the top of each memory query
    snap = memory_snapshot(device)
    return {
        "Limit": snap.limit,
        "InUse": snap.in_use,
        "MaxInUse": snap.max_in_use,
        "NumAllocs": snap.num_allocs,
        "NumFrees": snap.num_frees,
        "ActiveAllocs": snap.active_allocs,
        "MaxAllocSize": snap.max_alloc_size,
        "TotalSystemAllocs": snap.num_allocs,
        "TotalSystemFrees": snap.num_frees,
        "TotalActiveAllocs": snap.active_allocs,
    }


def memory_allocated(device: Device = None) -> int:
    """Bytes currently held by tensors on the HPU."""
    return memory_stats(device)["InUse"]


def max_memory_allocated(device: Device = None) -> int:
    """Peak bytes held by tensors on the HPU since the start or the last :func:`reset_peak_memory_stats`."""
    return memory_stats(device)["MaxInUse"]


def reset_peak_memory_stats(device: Device = None) -> None:
    """Make ``MaxInUse`` start again from the memory in use now."""
    from .._device import reset_peak

    reset_peak(device)


def memory_reserved(device: Device = None) -> int:
    """The device memory the SDK's allocator manages: ``Limit`` (gaudi-pytorch-bridge 1.19.0 ``hpu/memory.py``)."""
    return memory_stats(device)["Limit"]


def max_memory_reserved(device: Device = None) -> int:
    """The most device memory the SDK's allocator managed: ``Limit``, as on the SDK."""
    return memory_stats(device)["Limit"]


def memory_cached(device: Device = None) -> int:
    """The SDK's former name of :func:`memory_reserved`; warns with ``FutureWarning``, as the SDK does."""
    warnings.warn("torch.hpu.memory_cached has been renamed to torch.hpu.memory_reserved", FutureWarning, stacklevel=2)
    return memory_reserved(device)


def max_memory_cached(device: Device = None) -> int:
    """The SDK's former name of :func:`max_memory_reserved`; warns with ``FutureWarning``, as the SDK does."""
    warnings.warn(
        "torch.hpu.max_memory_cached has been renamed to torch.hpu.max_memory_reserved", FutureWarning, stacklevel=2
    )
    return max_memory_reserved(device)


def mem_get_info(device: Device = None) -> tuple[int, int]:
    """``(free, total)`` device memory in bytes: ``(Limit - InUse, Limit)``, as the SDK computes it."""
    stats = memory_stats(device)
    return stats["Limit"] - stats["InUse"], stats["Limit"]


# Only Gaudi's allocator keeps these; they refuse by name (see .._not_emulated).
memory_summary = _not_emulated.stand_in("habana_frameworks.torch.hpu", "memory_summary")
reset_accumulated_memory_stats = _not_emulated.stand_in("habana_frameworks.torch.hpu", "reset_accumulated_memory_stats")
