"""How ``torch.save`` / ``torch.load`` (and ``pickle``) treat ``"hpu"`` tensors: storages tagged ``"hpu"``.

On Gaudi an HPU tensor is saved like any device tensor: its storage with the location tag ``"hpu"``, which
``torch.load`` hands to ``map_location`` (a device, a dict or a function such as DeepSpeed's
``lambda storage, loc: storage``) or, without one, to the SDK, which copies the storage back to the HPU.

Here an ``"hpu"`` tensor is saved the same way: the storage of its backing tensor, tagged ``"hpu"`` by a tagger
registered with ``torch.serialization.register_package``, so files have the layout a Gaudi writes and load with any
``map_location``, on Gaudi too. A storage restored to ``"hpu"`` (no ``map_location``, ``map_location="hpu"`` or a
dict naming ``"hpu"``) is the host copy the file holds, presented to torch as a storage of device ``"hpu"``
(:func:`device_storage`): torch's rebuild then makes an ``"hpu"`` tensor of it and ``set_`` s it to that storage,
which the dispatch resolves to the host copy (:func:`backing_storage`), so the loaded tensor is an ``"hpu"`` tensor
whose backing tensor uses the file's data, and tensors that shared a storage when saved share one again.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from ._accounting import allocations
from ._devices import DEVICE_TYPE, backing_of, hpu_device

__all__ = ["backing_storage", "device_storage", "register"]

_registered = False
_BACKING: dict[int, torch.UntypedStorage] = {}


def device_storage(host: torch.UntypedStorage, index: int) -> torch.UntypedStorage:
    """A storage of device ``hpu:index`` over the memory of the backing storage ``host``, which it keeps alive.

    It owns no memory (``torch._C._construct_storage_from_data_pointer``): only the dispatch's ``set_`` reads it,
    through :func:`backing_storage`.
    """
    storage = torch._C._construct_storage_from_data_pointer(host.data_ptr(), hpu_device(index), host.nbytes())
    # Keyed by address: torch's file reader makes its own storage object over the same memory.
    key = host.data_ptr()
    if key:
        _BACKING[key] = host
        weakref.finalize(storage, _BACKING.pop, key, None)
    return storage  # type: ignore[return-value]


def backing_storage(storage: Any) -> torch.UntypedStorage | None:
    """The backing storage behind a storage made by :func:`device_storage` (``None`` for any other)."""
    if not isinstance(storage, torch.UntypedStorage) or storage.device.type != DEVICE_TYPE:
        return None
    if storage.nbytes() == 0:
        return torch.UntypedStorage(0, device=backing_of(storage.device.index or 0))
    return _BACKING.get(storage.data_ptr())


def _tag(storage: Any) -> str | None:
    untyped = storage._untyped_storage if isinstance(storage, torch.storage.TypedStorage) else storage
    if isinstance(untyped, torch.UntypedStorage) and allocations.is_tracked(untyped):
        return DEVICE_TYPE
    return None


def _restore(storage: Any, location: str) -> Any:
    if location == DEVICE_TYPE or location.startswith(DEVICE_TYPE + ":"):
        index = torch.device(location).index or 0
        return device_storage(storage, index)
    return None


def register() -> None:
    """Register the tagger and the restorer with ``torch.serialization`` (once per process)."""
    global _registered
    if not _registered:
        # Before torch's own taggers (CPU is 10): a backing storage on the host is tagged "hpu", not "cpu".
        torch.serialization.register_package(5, _tag, _restore)
        _registered = True
