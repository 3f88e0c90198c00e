"""Emulation of ``habana_frameworks.torch.utils.internal`` (DeepSpeed's HPU op builders import ``is_lazy``)."""

from __future__ import annotations

from .. import _not_emulated

__all__ = ["is_lazy"]


def is_lazy() -> bool:
    """Whether the SDK runs in lazy mode (``PT_HPU_LAZY_MODE=1`` when it loaded)."""
    from ..core import is_lazy as core_is_lazy

    return core_is_lazy()


_not_emulated.provide(globals(), "habana_frameworks.torch.utils.internal")
