"""Memory statistics of the emulated ``habana_frameworks.torch.hpu``.

The keys and meanings follow the SDK's memory-stats API. The values come from the device layer's exact accounting
of the storages of ``"hpu"`` tensors (see ``..device``), on the CPU and the CUDA backing alike. Each backing storage
is its own allocation (the emulator has no pool between the tensors and the backing allocator), so the "system"
counters equal the allocation counters.
"""

from __future__ import annotations

import torch

__all__ = [
    "MEMORY_STAT_KEYS",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_stats",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
]

MEMORY_STAT_KEYS = (
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
    from ..device import memory_snapshot

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
    from ..device import reset_peak

    reset_peak(device)


def memory_reserved(device: Device = None) -> int:
    """Bytes reserved from the device: what is in use, as the emulator keeps no pool of free blocks."""
    return memory_stats(device)["InUse"]


def max_memory_reserved(device: Device = None) -> int:
    """Peak bytes reserved (the peak in use, see :func:`memory_reserved`)."""
    return memory_stats(device)["MaxInUse"]


def memory_cached(device: Device = None) -> int:
    """The SDK's older name of :func:`memory_reserved`."""
    return memory_reserved(device)


def max_memory_cached(device: Device = None) -> int:
    """The SDK's older name of :func:`max_memory_reserved`."""
    return max_memory_reserved(device)


def reset_max_memory_allocated(device: Device = None) -> None:
    """Make ``MaxInUse`` start again from the memory in use now (as :func:`reset_peak_memory_stats`)."""
    reset_peak_memory_stats(device)
