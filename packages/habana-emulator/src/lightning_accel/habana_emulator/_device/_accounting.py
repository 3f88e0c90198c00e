"""Exact accounting of the emulated HPU's memory: every backing storage that becomes part of an ``"hpu"`` tensor.

A real Gaudi has its own device allocator, and the SDK's ``memory_stats`` reports what that allocator handed out.
The emulated device has no allocator of its own: its tensors are wrappers around tensors on the backing device. What
corresponds to a device allocation is a backing *storage* that enters the device layer: the result of a factory, of
a copy to ``"hpu"``, or of an operation that does not return a view or one of its inputs. The layer records such a
storage once, when it first wraps it, and attaches a finalizer to the storage's Python object. That object is kept
alive by the C++ storage for as long as the memory exists (torch preserves it), so the free is counted at the exact
moment the memory goes back to the host or the CUDA allocator, also when the last reference is held by C++ (autograd's
saved tensors, optimizer state reached only through C++).

What it does not count: temporaries that one ATen kernel allocates and frees on the backing device while it runs
(a real HPU kernel's workspace is also outside the SDK's tensor statistics), and storages that never become
``"hpu"`` tensors. A storage that is resized in place (an ``out=`` argument grown by the kernel) counts as a free of
its old size and an allocation of its new one, as a reallocation on a device would; a storage resized through
its own ``resize_`` (torch FSDP frees and reallocates its unsharded parameters that way) counts as a free when it
shrinks to nothing and as an allocation when it grows from nothing (:func:`resized`). Storages of zero bytes are not
allocations and are not counted.

The counters are kept per emulated device index (the index of the ``"hpu:N"`` tensor that first held the storage).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import torch

__all__ = ["AllocationStats", "DeviceAllocations", "allocations", "resized", "track", "track_resized"]


@dataclass(frozen=True)
class AllocationStats:
    """The counters of one emulated HPU at one moment, in bytes and counts.

    Attributes:
        in_use: Bytes held by live storages.
        max_in_use: The largest ``in_use`` since the start or the last :meth:`DeviceAllocations.reset_peak`.
        num_allocs: Storages recorded so far.
        num_frees: Storages freed so far.
        active_allocs: Storages alive now (``num_allocs - num_frees``).
        max_alloc_size: The largest single storage recorded, in bytes.
    """

    in_use: int
    max_in_use: int
    num_allocs: int
    num_frees: int
    active_allocs: int
    max_alloc_size: int


class _Counters:
    __slots__ = ("in_use", "max_alloc_size", "max_in_use", "num_allocs", "num_frees")

    def __init__(self) -> None:
        self.in_use = 0
        self.max_in_use = 0
        self.num_allocs = 0
        self.num_frees = 0
        self.max_alloc_size = 0


class DeviceAllocations:
    """The allocation counters of every emulated HPU; one instance per process (:data:`allocations`)."""

    def __init__(self) -> None:
        # Frees run on whichever thread drops the last reference (autograd's device thread, for one), and also on this
        # thread while it holds the lock: the garbage collector can run inside `record` and call `_release` for
        # another storage. Hence reentrant (a plain Lock deadlocked the process there).
        self._lock = threading.RLock()
        # storage key -> (device index, bytes, weak reference whose callback counts the free)
        self._live: dict[int, tuple[int, int, weakref.ref[torch.UntypedStorage]]] = {}
        # id of that weak reference -> storage key: the callback receives only the reference
        self._keys: dict[int, int] = {}
        self._counters: dict[int, _Counters] = {}

    def _of(self, index: int) -> _Counters:
        counters = self._counters.get(index)
        if counters is None:
            counters = self._counters[index] = _Counters()
        return counters

    def stats(self, index: int) -> AllocationStats:
        """The counters of emulated HPU ``index``."""
        with self._lock:
            c = self._of(index)
            return AllocationStats(
                in_use=c.in_use,
                max_in_use=c.max_in_use,
                num_allocs=c.num_allocs,
                num_frees=c.num_frees,
                active_allocs=c.num_allocs - c.num_frees,
                max_alloc_size=c.max_alloc_size,
            )

    def reset_peak(self, index: int) -> None:
        """Make the peak of emulated HPU ``index`` equal to the bytes in use now."""
        with self._lock:
            c = self._of(index)
            c.max_in_use = c.in_use

    def is_tracked(self, storage: torch.UntypedStorage) -> bool:
        """Whether ``storage`` is recorded as a live allocation."""
        return storage._cdata in self._live

    def record(self, storage: torch.UntypedStorage, index: int) -> None:
        """Record ``storage`` as an allocation of emulated HPU ``index`` unless it is recorded already.

        A recorded storage whose size changed since is counted as reallocated (a free and an allocation).
        """
        key = storage._cdata
        nbytes = storage.nbytes()
        with self._lock:
            known = self._live.get(key)
            if known is not None:
                if known[1] == nbytes:
                    return
                if known[1]:
                    self._free(known[0], known[1])
                ref = known[2]
            elif nbytes:
                # A weak reference with a callback costs a fraction of weakref.finalize, and this runs per operation.
                ref = weakref.ref(storage, self._release)
                self._keys[id(ref)] = key
            else:
                return
            self._live[key] = (index, nbytes, ref)
            c = self._of(index)
            c.in_use += nbytes
            if c.in_use > c.max_in_use:
                c.max_in_use = c.in_use
            c.num_allocs += 1
            if nbytes > c.max_alloc_size:
                c.max_alloc_size = nbytes

    def resized(self, storage: torch.UntypedStorage, index: int) -> None:
        """Count an in-place resize of ``storage`` (of emulated HPU ``index``) as a free and an allocation.

        The old bytes, if any, are freed and the new ones, if any, allocated; the storage stays known while it holds
        nothing, so that growing it again counts too.
        """
        key = storage._cdata
        nbytes = storage.nbytes()
        with self._lock:
            known = self._live.get(key)
            if known is None:
                if nbytes:
                    self.record(storage, index)
                return
            if known[1] == nbytes:
                return
            if known[1]:
                self._free(known[0], known[1])
            self._live[key] = (known[0], nbytes, known[2])
            if nbytes:
                c = self._of(known[0])
                c.in_use += nbytes
                if c.in_use > c.max_in_use:
                    c.max_in_use = c.in_use
                c.num_allocs += 1
                if nbytes > c.max_alloc_size:
                    c.max_alloc_size = nbytes

    def _free(self, index: int, nbytes: int) -> None:
        c = self._of(index)
        c.in_use -= nbytes
        c.num_frees += 1

    def _release(self, ref: weakref.ref[torch.UntypedStorage]) -> None:
        with self._lock:
            key = self._keys.pop(id(ref), None)
            known = self._live.pop(key, None) if key is not None else None
            if known is not None and known[1]:
                self._free(known[0], known[1])


allocations = DeviceAllocations()


def track(backing: torch.Tensor, index: int) -> None:
    """Record the storage of ``backing`` (just wrapped as a tensor of emulated HPU ``index``) if it is new."""
    storage = backing.untyped_storage()
    if storage._cdata not in allocations._live:
        allocations.record(storage, index)


def track_resized(backing: torch.Tensor, index: int) -> None:
    """Record the storage of ``backing`` after an operation that may have resized it in place."""
    allocations.record(backing.untyped_storage(), index)


def resized(storage: torch.UntypedStorage, index: int) -> None:
    """Count an in-place resize of ``storage``, the backing storage of a tensor of emulated HPU ``index``."""
    allocations.resized(storage, index)
