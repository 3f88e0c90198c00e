"""``torch.Generator(device="hpu")``: a generator of the emulated HPU, drawing as the backing device's generators do.

torch makes a device's generators in C++, through the backend's hooks (``PrivateUse1HooksInterface::getNewGenerator``),
which a backend written in Python cannot provide (torch's Python hooks leave it unimplemented): torch's own
``torch.Generator(device="hpu")`` fails with "You should register `PrivateUse1HooksInterface` ... and implement
`getNewGenerator`". On Gaudi the SDK's hooks provide one.

So loading the emulated SDK makes ``torch.Generator`` a subclass of torch's generator class (:class:`Generator`)
whose constructor answers ``device="hpu"`` with a generator of the backing device that reports ``device`` as
``hpu:N``; every other device gets torch's own generator, and ``isinstance(g, torch.Generator)`` holds for every
generator, torch's included. The random operations of the emulated device run on the backing device, so they accept
such a generator (``torch.randn(n, device="hpu", generator=g)``, ``x.normal_(generator=g)``): on the CPU backing they
draw what a CPU generator with the same seed and state draws.

What a real Gaudi does differently: its generator is an HPU generator in C++, so torch refuses it for an operation
on the host ("Expected a 'cpu' device type for generator"); here such an operation accepts it, because underneath it
is a generator of the backing device.
"""

from __future__ import annotations

from typing import Any

import torch

from ._devices import DEVICE_TYPE, backing_of, hpu_device, index_of

__all__ = ["Generator", "register"]

_TorchGenerator = torch._C.Generator


class _GeneratorMeta(type(_TorchGenerator)):  # type: ignore[misc]
    def __instancecheck__(cls, instance: Any) -> bool:
        # torch's own generators (torch.default_generator, CUDA's...) are generators too.
        return isinstance(instance, _TorchGenerator)

    def __subclasscheck__(cls, subclass: Any) -> bool:
        return isinstance(subclass, type) and issubclass(subclass, _TorchGenerator)


class Generator(_TorchGenerator, metaclass=_GeneratorMeta):
    """``torch.Generator`` with the emulated HPU's devices: ``torch.Generator(device="hpu")`` works as on Gaudi.

    Example:
        >>> g = torch.Generator(device="hpu").manual_seed(0)
        >>> torch.randn(3, device="hpu", generator=g).device
        device(type='hpu', index=0)
    """

    _hpu: torch.device

    def __new__(cls, device: Any = "cpu") -> Any:
        target = torch.device(device)
        if target.type != DEVICE_TYPE:
            return _TorchGenerator(device)
        index = index_of(target)
        generator = super().__new__(cls, backing_of(index))  # type: ignore[call-arg]
        generator._hpu = hpu_device(index)
        return generator

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        """The HPU this generator belongs to (its numbers come from a generator of the backing device)."""
        return self._hpu


def register() -> None:
    """Make ``torch.Generator`` the class above (once per process)."""
    # NOT an SDK load effect: the real SDK leaves torch.Generator alone (its HPU generator is a C++ GeneratorImpl).
    # A limit of this Python wrapper device, which issue 28 deletes: lightning_accel.emulated_hpu has a native one.
    torch.Generator = Generator  # type: ignore[misc]
