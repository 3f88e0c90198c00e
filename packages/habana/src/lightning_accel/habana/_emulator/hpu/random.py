"""The HPU random number generator of the emulator: the backing device's default generator."""

from __future__ import annotations

import torch

from .._backing import backing_type

__all__ = [
    "default_generators",
    "get_rng_state",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "set_rng_state",
]


class _DefaultGenerators:
    """``default_generators[i]``: the generator of HPU ``i``, the backing device's default generator here."""

    def __getitem__(self, index: int) -> torch.Generator:
        if backing_type() == "cuda":
            return torch.cuda.default_generators[index % torch.cuda.device_count()]
        return torch.default_generator

    def __len__(self) -> int:
        from ._devices import device_count

        return device_count()


default_generators = _DefaultGenerators()


def _on_cuda() -> bool:
    return backing_type() == "cuda"


def manual_seed(seed: int) -> None:
    """Seed the HPU generator."""
    if _on_cuda():
        torch.cuda.manual_seed(int(seed))
    else:
        torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed the generators of all HPUs (one shared generator on the CPU backing)."""
    if _on_cuda():
        torch.cuda.manual_seed_all(int(seed))
    else:
        torch.default_generator.manual_seed(int(seed))


def seed() -> None:
    """Seed the HPU generator with a non-deterministic random number."""
    if _on_cuda():
        torch.cuda.seed()
    else:
        torch.default_generator.seed()


def initial_seed() -> int:
    """The seed the HPU generator was last seeded with."""
    if _on_cuda():
        return int(torch.cuda.initial_seed())
    return int(torch.default_generator.initial_seed())


def get_rng_state(device: int | str | torch.device = "hpu") -> torch.Tensor:
    """The HPU generator state as a ``torch.ByteTensor`` (on the host)."""
    if _on_cuda():
        return torch.cuda.get_rng_state()
    return torch.default_generator.get_state()


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
    if _on_cuda():
        torch.cuda.set_rng_state(new_state)
    else:
        torch.default_generator.set_state(new_state)
