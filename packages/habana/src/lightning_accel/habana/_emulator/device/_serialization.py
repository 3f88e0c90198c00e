"""How ``torch.save`` / ``torch.load`` treat ``"hpu"`` tensors: storages tagged ``"hpu"``, restored to the host.

On Gaudi an HPU tensor is saved like any device tensor: its storage with the location tag ``"hpu"``, which
``torch.load`` hands to ``map_location`` (a device, a dict or a function such as DeepSpeed's
``lambda storage, loc: storage``) or, without one, to the SDK, which copies the storage back to the HPU.

Here an ``"hpu"`` tensor is saved the same way: the storage of its backing tensor, tagged ``"hpu"`` by a tagger
registered with ``torch.serialization.register_package``, so files have the layout a Gaudi writes and load with any
``map_location``, on Gaudi too. What differs: without ``map_location`` the emulator restores the storage to the host
(the backing memory), not to the ``"hpu"`` device, because the emulated device has no storages of its own; move the
loaded tensors with ``.to("hpu")`` (``load_state_dict`` into a model on ``"hpu"`` copies them there anyway).
"""

from __future__ import annotations

from typing import Any

import torch

from ._accounting import allocations
from ._devices import DEVICE_TYPE

__all__ = ["register"]

_registered = False


def _tag(storage: Any) -> str | None:
    untyped = storage._untyped_storage if isinstance(storage, torch.storage.TypedStorage) else storage
    if isinstance(untyped, torch.UntypedStorage) and allocations.is_tracked(untyped):
        return DEVICE_TYPE
    return None


def _restore(storage: Any, location: str) -> Any:
    if location == DEVICE_TYPE or location.startswith(DEVICE_TYPE + ":"):
        return storage  # the host copy the file holds: see the module docstring
    return None


def register() -> None:
    """Register the tagger and the restorer with ``torch.serialization`` (once per process)."""
    global _registered
    if not _registered:
        # Before torch's own taggers (CPU is 10): a backing storage on the host is tagged "hpu", not "cpu".
        torch.serialization.register_package(5, _tag, _restore)
        _registered = True
