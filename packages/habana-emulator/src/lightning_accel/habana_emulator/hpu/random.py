"""The HPU random number generator of the emulator: the C++ device's own generator, not the host's.

As on the SDK (``htcore._get_default_generator()``, one entry in ``default_generators``), random operations on
``"hpu"`` draw from a generator of device ``hpu:0``, so an HPU draw never moves the host generator and
``torch.manual_seed`` reaches it only through the SDK's wrapper of ``torch.manual_seed`` (``_load_effects``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .. import _native, _not_emulated

__all__ = [
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]


class _DefaultGenerators:
    """``default_generators[0]``: the HPU's generator; a process drives one HPU, so there is one entry."""

    def __getitem__(self, index: int) -> torch.Generator:
        if index not in (0, -1):
            raise IndexError(f"default_generators[{index}]: a process drives one HPU, so the only index is 0.")
        return _native.default_generator()

    def __len__(self) -> int:
        return 1


default_generators = _DefaultGenerators()


def _generator() -> torch.Generator:
    return _native.default_generator()


def manual_seed(seed: int) -> torch.Generator:
    """Seed the HPU generator and return it, as the SDK does (gaudi-pytorch-bridge 1.19.0 ``hpu/random.py``)."""
    return _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed the generators of all HPUs of this process (one: a process drives one HPU)."""
    _generator().manual_seed(int(seed))


def seed() -> int:
    """Seed the HPU generator with a non-deterministic random number, and return it."""
    return int(_generator().seed())


def seed_all() -> None:
    """Seed the generators of all HPUs with a non-deterministic random number (one generator per process)."""
    _generator().seed()


def get_rng_state_all() -> list[torch.Tensor]:
    """The states of the HPU generators of this process: one, as a process drives one HPU."""
    return [get_rng_state(0)]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Restore the states returned by :func:`get_rng_state_all`.

    Raises:
        RuntimeError: When not exactly one state is given (the SDK's error text).
    """
    states = list(new_states)
    if len(states) != 1:
        raise RuntimeError("hpu set_rng_state_all supports only states len of 1")
    set_rng_state(states[0], 0)


def initial_seed() -> int:
    """The seed the HPU generator was last seeded with."""
    return int(_generator().initial_seed())


def get_rng_state(device: int | str | torch.device = "hpu") -> torch.Tensor:
    """The HPU generator state as a ``torch.ByteTensor`` (on the host)."""
    return _generator().get_state()


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "hpu") -> None:
    """Restore a state returned by :func:`get_rng_state`.

    Raises:
        TypeError: When ``new_state`` is not a ``torch.uint8`` tensor.
    """
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError(
            f"new_state must be a torch.ByteTensor as returned by get_rng_state(), got {type(new_state).__name__}"
            f"{'' if not isinstance(new_state, torch.Tensor) else ' of dtype ' + str(new_state.dtype)}."
        )
    _generator().set_state(new_state)


_not_emulated.provide(globals(), "habana_frameworks.torch.hpu.random")
