"""Memory statistics of the emulated ``habana_frameworks.torch.hpu``.

The keys and meanings follow the SDK's memory-stats API. On the CUDA backing they come from the CUDA caching
allocator; on the CPU backing from :class:`CPULedger`, which samples live tensors when a statistic is queried.
"""

from __future__ import annotations

import threading

import torch

from .._backing import backing_device, backing_type
from ._ledger import CPULedger, LedgerSnapshot

__all__ = ["MEMORY_STAT_KEYS", "max_memory_allocated", "memory_allocated", "memory_stats", "reset_peak_memory_stats"]

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

_ledger_lock = threading.Lock()
_ledger: CPULedger | None = None
_cuda_max_alloc: dict[int, int] = {}

Device = int | str | torch.device | None


def _cpu_ledger() -> CPULedger:
    global _ledger
    with _ledger_lock:
        if _ledger is None:
            _ledger = CPULedger()
        return _ledger


def _from_ledger(snap: LedgerSnapshot) -> dict[str, int]:
    return {
        "Limit": snap.limit,
        "InUse": snap.in_use,
        "MaxInUse": snap.max_in_use,
        "NumAllocs": snap.num_allocs,
        "NumFrees": snap.num_frees,
        "ActiveAllocs": snap.active_allocs,
        "MaxAllocSize": snap.max_alloc_size,
        # Each CPU storage is its own allocation from the host heap: there is no pool in between.
        "TotalSystemAllocs": snap.num_allocs,
        "TotalSystemFrees": snap.num_frees,
        "TotalActiveAllocs": snap.active_allocs,
    }


def _cuda_device(device: Device) -> torch.device:
    if isinstance(device, int) and not isinstance(device, bool):
        return backing_device(device)
    if device is not None and torch.device(device).index is not None:
        return backing_device(torch.device(device).index)
    return backing_device()


def _from_cuda(device: torch.device) -> dict[str, int]:
    stats = torch.cuda.memory_stats(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    largest = max(
        (
            block["size"]
            for seg in torch.cuda.memory_snapshot()
            for block in seg["blocks"]
            if block["state"] == "active_allocated" and seg["device"] == index
        ),
        default=0,
    )
    _cuda_max_alloc[index] = max(_cuda_max_alloc.get(index, 0), int(largest))
    return {
        "Limit": int(torch.cuda.get_device_properties(device).total_memory),
        "InUse": int(stats.get("allocated_bytes.all.current", 0)),
        "MaxInUse": int(stats.get("allocated_bytes.all.peak", 0)),
        "NumAllocs": int(stats.get("allocation.all.allocated", 0)),
        "NumFrees": int(stats.get("allocation.all.freed", 0)),
        "ActiveAllocs": int(stats.get("allocation.all.current", 0)),
        "MaxAllocSize": _cuda_max_alloc[index],
        "TotalSystemAllocs": int(stats.get("segment.all.allocated", 0)),
        "TotalSystemFrees": int(stats.get("segment.all.freed", 0)),
        "TotalActiveAllocs": int(stats.get("segment.all.current", 0)),
    }


def memory_stats(device: Device = None) -> dict[str, int]:
    """The ten memory statistics of an HPU, in bytes (sizes) and counts.

    Keys: ``Limit``, ``InUse``, ``MaxInUse``, ``NumAllocs``, ``NumFrees``, ``ActiveAllocs``, ``MaxAllocSize``,
    ``TotalSystemAllocs``, ``TotalSystemFrees``, ``TotalActiveAllocs``.
    """
    if backing_type() == "cuda":
        return _from_cuda(_cuda_device(device))
    return _from_ledger(_cpu_ledger().scan())


def memory_allocated(device: Device = None) -> int:
    """Bytes currently held by tensors on the HPU."""
    return memory_stats(device)["InUse"]


def max_memory_allocated(device: Device = None) -> int:
    """Peak bytes held by tensors on the HPU since the start or the last :func:`reset_peak_memory_stats`."""
    return memory_stats(device)["MaxInUse"]


def reset_peak_memory_stats(device: Device = None) -> None:
    """Make ``MaxInUse`` start again from the memory in use now."""
    if backing_type() == "cuda":
        torch.cuda.reset_peak_memory_stats(_cuda_device(device))
        return
    ledger = _cpu_ledger()
    ledger.scan()
    ledger.reset_peak()
