"""The memory statistics of the emulated ``"hpu"`` device, which ``hpu.memory`` turns into the SDK's ten keys.

They come from exact accounting of the backing storages of ``"hpu"`` tensors (``_accounting``), on both backings.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import torch

from ._accounting import AllocationStats, allocations
from ._devices import backing_of, current_index, index_of

__all__ = ["MemorySnapshot", "memory_snapshot", "reset_peak"]

Device = int | str | torch.device | None


@dataclass(frozen=True)
class MemorySnapshot(AllocationStats):
    """An emulated HPU's allocation counters at one moment, with ``limit``, the backing device's memory in bytes."""

    limit: int


def _index(device: Device) -> int:
    if device is None:
        return current_index()
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    parsed = torch.device(device)
    if parsed.type != "hpu":
        raise ValueError(
            f"device={device!r} is not an HPU device. Accepted: None, an index, 'hpu', 'hpu:N' or "
            "torch.device('hpu', N)."
        )
    return index_of(parsed)


def _limit(index: int) -> int:
    backing = backing_of(index)
    if backing.type == "cuda":
        return int(torch.cuda.get_device_properties(backing).total_memory)
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # non-POSIX hosts
        return 0


def memory_snapshot(device: Device = None) -> MemorySnapshot:
    """The exact allocation counters of an emulated HPU (the current one by default).

    ``limit`` is the backing device's memory (host RAM, or the GPU's total memory); the other fields count the
    backing storages of ``"hpu"`` tensors (see ``_accounting``).

    Raises:
        ValueError: When ``device`` is not an HPU device or index.
    """
    index = _index(device)
    return MemorySnapshot(**asdict(allocations.stats(index)), limit=_limit(index))


def reset_peak(device: Device = None) -> None:
    """Make the peak (``max_in_use``) of an emulated HPU equal to the bytes in use now."""
    allocations.reset_peak(_index(device))
