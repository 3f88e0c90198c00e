"""Memory statistics of the emulated ``habana_frameworks.torch.hpu``.

The keys and meanings follow the SDK's memory-stats API. The values come from the C++ device's allocator, which
counts every byte of every HPU storage exactly (``lightning_accel.emulated_hpu``). Each storage is its own allocation
(the emulator has no pool between the tensors and host memory), so the "system" counters equal the allocation
counters. ``Limit`` is the device's memory, read when the SDK loads: ``LIGHTNING_ACCEL_EMULATE_HPU_MEMORY``, or the
emulated generation's when unset (96 GiB on a Gaudi2, 128 GiB on a Gaudi3); an allocation past it fails with the SDK's
out-of-memory error. (The host's physical memory only if the device's limit was set to 0, no limit.)
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

from .. import _native, _not_emulated
from ._devices import _check_index, _index_of, _lazy_init

__all__ = [
    "formatted_memory_stats",
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


def _check_device(device: Device) -> None:
    # A process drives one HPU: any valid index names it (the statistics are the process's device's).
    if device is not None:
        _check_index(_index_of(device), "device")


def _host_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # non-POSIX hosts
        return 0


def memory_stats(device: Device = None) -> dict[str, int]:
    """The ten memory statistics of an HPU, in bytes (sizes) and counts.

    Keys: ``Limit``, ``InUse``, ``MaxInUse``, ``NumAllocs``, ``NumFrees``, ``ActiveAllocs``, ``MaxAllocSize``,
    ``TotalSystemAllocs``, ``TotalSystemFrees``, ``TotalActiveAllocs``.
    """
    _lazy_init("hpu.memory_stats()")  # as the SDK's hpu.init() at the top of each memory query
    _check_device(device)
    stats = _native.memory_stats()
    return {
        "Limit": stats["limit"] or _host_memory(),
        "InUse": stats["in_use"],
        "MaxInUse": stats["peak"],
        "NumAllocs": stats["num_allocs"],
        "NumFrees": stats["num_frees"],
        "ActiveAllocs": stats["active_allocs"],
        "MaxAllocSize": stats["max_alloc_size"],
        "TotalSystemAllocs": stats["num_allocs"],
        "TotalSystemFrees": stats["num_frees"],
        "TotalActiveAllocs": stats["active_allocs"],
    }


def memory_allocated(device: Device = None) -> int:
    """Bytes currently held by tensors on the HPU."""
    return memory_stats(device)["InUse"]


def max_memory_allocated(device: Device = None) -> int:
    """Peak bytes held by tensors on the HPU since the start or the last :func:`reset_peak_memory_stats`."""
    return memory_stats(device)["MaxInUse"]


def reset_peak_memory_stats(device: Device = None) -> None:
    """Make ``MaxInUse`` start again from the memory in use now."""
    _check_device(device)
    _native.reset_peak_memory_stats()


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


# The statistics that are sizes in bytes; formatted_memory_stats adds KB / MB / GB to them.
_SIZES = ("Limit", "InUse", "MaxInUse", "MaxAllocSize")
_UNITS = (("KB", 1 << 10), ("MB", 1 << 20), ("GB", 1 << 30))


def formatted_memory_stats(device: Device = None) -> str:
    """:func:`memory_stats` as text, one statistic a line, the sizes also in KB, MB and GB where they reach them.

    The layout is the SDK's (``hpu/memory.py`` at bcc5172): a header line with the device id, then
    ``"    <name padded to 39> :- <value>"``; a size reads ``"7340288 / 7168.00KB / 7.00MB"``.
    """
    stats = memory_stats(device)
    index = 0 if device is None else _index_of(device)

    def value_text(name: str, value: int) -> str:
        if name not in _SIZES:
            return str(value)
        parts = [str(value)] + [f"{value / size:.2f}{unit}" for unit, size in _UNITS if value >= size]
        return " / ".join(parts)

    lines = [f"    Memory Statistics (Device ID) {' ' * 9} :- {index:<3}"]
    lines += [f"    {name:<39} :- {value_text(name, value)}" for name, value in stats.items()]
    return "\n".join(lines)


# Only Gaudi's allocator keeps these; they refuse by name (see .._not_emulated).
memory_summary = _not_emulated.stand_in("habana_frameworks.torch.hpu", "memory_summary")
reset_accumulated_memory_stats = _not_emulated.stand_in("habana_frameworks.torch.hpu", "reset_accumulated_memory_stats")
