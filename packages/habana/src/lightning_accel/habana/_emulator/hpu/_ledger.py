"""Accounting of the tensors that live on the CPU backing, sampled when statistics are queried.

Stock torch keeps no statistics for its CPU allocator, and hooking every operator would cost far more than the
plugin-overhead budget allows. The ledger therefore finds live tensors only when statistics are queried: it walks the
objects the garbage collector tracks, records every tensor storage it has not seen yet (an allocation), and attaches a
finalizer to the storage so that the free is counted exactly when the storage dies, even between queries.

What that measures: parameters, gradients, optimizer state, batches and any other tensor alive at a query. What it
cannot see: a tensor created and freed between two queries (for example activations of one step), and tensors held
only by C++ (autograd's saved tensors). On the CPU backing every storage is its own allocation from the host heap,
so the "system" counters equal the allocation counters.
"""

from __future__ import annotations

import gc
import os
import threading
import weakref
from dataclasses import dataclass

import torch

__all__ = ["CPULedger", "LedgerSnapshot"]


@dataclass(frozen=True)
class LedgerSnapshot:
    """The ledger's counters at one moment, in bytes and counts."""

    limit: int
    in_use: int
    max_in_use: int
    num_allocs: int
    num_frees: int
    active_allocs: int
    max_alloc_size: int


def _host_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # non-POSIX hosts
        return 0


class CPULedger:
    """Counts the storages of live CPU tensors; see the module docstring for what it can and cannot see."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, int] = {}
        self._in_use = 0
        self._max_in_use = 0
        self._num_allocs = 0
        self._num_frees = 0
        self._max_alloc_size = 0
        self._limit = _host_memory_bytes()
        self._is_tensor_type: dict[type, bool] = {}

    def scan(self) -> LedgerSnapshot:
        """Record the storages of every live CPU tensor and return the counters."""
        tensor_types = self._is_tensor_type
        for obj in gc.get_objects():
            kind = type(obj)
            is_tensor = tensor_types.get(kind)
            if is_tensor is None:
                is_tensor = tensor_types[kind] = issubclass(kind, torch.Tensor)
            if is_tensor:
                self._record(obj)
                # Gradients are created in C++ and may have no Python object yet, so the walk cannot find them alone.
                try:
                    grad = obj.grad if obj.is_leaf and obj.requires_grad else None
                except RuntimeError:
                    # Some views refuse autograd queries (a no_grad view whose base changed in place): no gradient.
                    grad = None
                if grad is not None:
                    self._record(grad)
        with self._lock:
            self._max_in_use = max(self._max_in_use, self._in_use)
        return self.snapshot()

    def snapshot(self) -> LedgerSnapshot:
        """The counters as last updated, without scanning."""
        with self._lock:
            return LedgerSnapshot(
                limit=self._limit,
                in_use=self._in_use,
                max_in_use=self._max_in_use,
                num_allocs=self._num_allocs,
                num_frees=self._num_frees,
                active_allocs=len(self._live),
                max_alloc_size=self._max_alloc_size,
            )

    def reset_peak(self) -> None:
        """Make the peak equal to the memory in use now."""
        with self._lock:
            self._max_in_use = self._in_use

    def _record(self, tensor: torch.Tensor) -> None:
        if tensor.device.type != "cpu" or tensor.layout != torch.strided:
            return
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensors without storage (functional or fake tensors)
            return
        key = id(storage)
        if key in self._live:
            return
        nbytes = int(storage.nbytes())
        with self._lock:
            self._live[key] = nbytes
            self._in_use += nbytes
            self._num_allocs += 1
            self._max_alloc_size = max(self._max_alloc_size, nbytes)
        # The finalizer holds only the key: the storage's Python object is kept alive by the C++ storage, so it dies
        # exactly when the memory is released.
        weakref.finalize(storage, self._release, key)

    def _release(self, key: int) -> None:
        with self._lock:
            nbytes = self._live.pop(key, None)
            if nbytes is None:
                return
            self._in_use -= nbytes
            self._num_frees += 1
