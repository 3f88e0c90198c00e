"""Kernels of the emulated ``"hpu"`` device for torch's PrivateUse1 dispatch key: factories and copies.

A factory (``torch.empty(..., device="hpu")``, ``torch.randn``, ``torch.arange``...) has no tensor argument, so it
cannot reach ``__torch_dispatch__``: the dispatcher picks the kernel from the ``device=`` argument, which is the
PrivateUse1 key once ``"hpu"`` is PrivateUse1 renamed. Each kernel here runs the same ATen factory on the backing
device and wraps the result.

``empty.memory_format`` and ``empty_strided`` are all torch needs: the other factories are composites that call
one of them and then fill the result in place, which reaches ``__torch_dispatch__``. The common factories are
registered as well because that saves a round trip through Python per call (``arange``, ``linspace`` and friends
are composites that make an empty tensor and resize it through ``out=``). ``_efficientzerotensor`` (autograd's
zero gradients) gives ordinary zeros: a wrapper cannot carry torch's ZeroTensor key.

Random factories draw from the backing device's default generator (see the package docstring).

The copy kernels (``_copy_from``, ``_copy_from_and_resize``) serve the paths where torch copies with the Python
dispatch key excluded, so that ``__torch_dispatch__`` is skipped: ``torch.tensor(data, device="hpu")`` is built that
way. ``record_stream`` is here for the same reason: torch FSDP calls it with the Python key excluded.
"""

from __future__ import annotations

from typing import Any

import torch

from ._accounting import track
from ._devices import DEVICE_TYPE, backing_of, hpu_device, index_of
from ._serialization import backing_storage
from ._tensor import HPUTensor, unwrap, wrap

__all__ = ["FACTORIES", "register_kernels"]

FACTORIES = (
    "empty.memory_format",
    "empty_strided",
    "zeros",
    "ones",
    "full",
    "scalar_tensor",
    "arange",
    "arange.start",
    "arange.start_step",
    "linspace",
    "logspace",
    "eye",
    "eye.m",
    "rand",
    "rand.generator",
    "randn",
    "randn.generator",
    "randint",
    "randint.generator",
    "randint.low",
    "randint.low_generator",
    "randperm",
    "randperm.generator",
    "normal.float_float",
    "tril_indices",
    "triu_indices",
)
"""ATen factories (``name.overload``) with an ``"hpu"`` kernel; ``torch.library`` names, without ``aten::``."""

_library: torch.library.Library | None = None


def _factory(packet: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        device = kwargs.get("device")
        index = index_of(torch.device(device)) if device is not None else index_of(torch.device(DEVICE_TYPE))
        kwargs["device"] = backing_of(index)
        out = packet(*args, **kwargs)
        track(out, index)
        return wrap(out, hpu_device(index))

    return kernel


def _efficient_zero_tensor(size: Any, **kwargs: Any) -> torch.Tensor:
    # autograd's zero gradients (sgn, abs... of a real input; torch.func) ask for an "efficient" zero tensor, which on
    # the CPU and CUDA is a storage-less tensor with the ZeroTensor key. A wrapper cannot carry that key, and a
    # wrapped ZeroTensor would refuse in-place accumulation; a device without the key (as on Gaudi) gives real zeros.
    device = kwargs.pop("device", None)
    index = index_of(torch.device(device)) if device is not None else index_of(torch.device(DEVICE_TYPE))
    out = torch.zeros(size, dtype=kwargs.get("dtype"), device=backing_of(index))
    track(out, index)
    return wrap(out, hpu_device(index))


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    if type(dst) is not HPUTensor and dst.device.type == DEVICE_TYPE:
        # A plain tensor over a storage restored to "hpu" (pickle's storage format fills it after restoring it):
        # write to the backing storage it stands for.
        host = backing_storage(dst.untyped_storage())
        if host is not None:
            view = torch.empty(0, dtype=dst.dtype, device=host.device)
            view.set_(host, dst.storage_offset(), dst.size(), dst.stride()).copy_(unwrap(src), non_blocking)
            return dst
    if type(dst) is not HPUTensor and type(src) is not HPUTensor:
        raise RuntimeError(
            f"_copy_from reached the emulated HPU with neither tensor on it: {src.device}, {dst.device}."
        )
    unwrap(dst).copy_(unwrap(src), non_blocking)
    return dst


def _copy_from_and_resize(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if type(dst) is HPUTensor and dst.size() != src.size():
        raise NotImplementedError(
            f"Copying a tensor of shape {tuple(src.size())} into an 'hpu' tensor of shape {tuple(dst.size())} would "
            "resize it in place, which the emulated HPU device cannot do (its tensors are wrappers whose shape is "
            "fixed when they are made). Copy into a tensor of the right shape; on a real Gaudi this runs."
        )
    unwrap(dst).copy_(unwrap(src))
    return dst


def _record_stream(tensor: torch.Tensor, stream: Any) -> None:
    # A device with streams keeps a tensor's memory until work queued on `stream` is done; every kernel of a real
    # PrivateUse1 backend has one. torch FSDP calls it with the Python key excluded (no_dispatch), so it lands here,
    # not in __torch_dispatch__. The emulator runs all work in issue order, so there is nothing to wait for.
    return None


def register_kernels() -> None:
    """Register the kernels of :data:`FACTORIES` and the copy kernels for PrivateUse1, once per process."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("aten", "IMPL")
    for qualified in FACTORIES:
        name, _, overload = qualified.partition(".")
        packet = getattr(getattr(torch.ops.aten, name), overload or "default")
        library.impl(qualified, _factory(packet), "PrivateUse1")
    library.impl("_efficientzerotensor", _efficient_zero_tensor, "PrivateUse1")
    library.impl("_copy_from", _copy_from, "PrivateUse1")
    library.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    library.impl("record_stream", _record_stream, "PrivateUse1")
    _library = library
