"""Host memory pinned for the emulated HPU: ``tensor.pin_memory()`` and ``tensor.is_pinned()``.

On Gaudi, pinned (page-locked) host memory lets the runtime copy between host and device asynchronously; a
``DataLoader(pin_memory=True)`` pins its batches, and DeepSpeed pins its host buffers for ZeRO-Offload and
ZeRO-Infinity. torch pins for the current accelerator (the HPU, once the SDK is loaded and no GPU is present) or the
device named in the call, through that device's pinned-memory allocator, which a Python backend cannot provide
(torch's Python hooks have no such entry). The emulator's kernels for host tensors keep the semantics code relies on:
pinning for the HPU returns a copy that ``is_pinned`` then reports as pinned (pinning it again returns it as is);
pinning for another device goes to torch's own implementation. What is not emulated: the copy is ordinary host
memory, as the emulator's host-device copies are synchronous anyway.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch

__all__ = ["register"]

_library: torch.library.Library | None = None
# Storages handed out by pin_memory, by the address of their StorageImpl, held weakly through the storage object.
_pinned: dict[int, Any] = {}


def _key(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage()._cdata)


_ORIGINAL = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def _for_hpu(device: Any) -> bool:
    if device is None:
        current = torch.accelerator.current_accelerator()
        return current is not None and current.type == "hpu"
    return torch.device(device).type == "hpu"


def _is_pinned(tensor: torch.Tensor, device: Any = None) -> bool:
    if not _for_hpu(device):
        return bool(torch.ops.aten.is_pinned.default.redispatch(_ORIGINAL, tensor, device))
    return _key(tensor) in _pinned


def _forget(key: int, _ref: Any) -> None:
    _pinned.pop(key, None)


def _pin_memory(tensor: torch.Tensor, device: Any = None) -> torch.Tensor:
    if not _for_hpu(device):
        pinned: torch.Tensor = torch.ops.aten._pin_memory.default.redispatch(_ORIGINAL, tensor, device)
        return pinned
    copy = tensor.clone()
    key = _key(copy)
    storage = copy.untyped_storage()
    _pinned[key] = weakref.ref(storage, functools.partial(_forget, key))
    return copy


def register() -> None:
    """Register the two kernels for host tensors (the CPU key), once per process."""
    global _library
    if _library is None:
        library = torch.library.Library("aten", "IMPL")
        library.impl("is_pinned", _is_pinned, "CPU")
        library.impl("_pin_memory", _pin_memory, "CPU")
        _library = library
