"""Emulation of ``habana_frameworks.torch.core.step_closure``: graph boundaries that only lazy mode has.

DeepSpeed's HPU optimizers call ``htcore.step_closure._mark_step_if_lazy()`` before their update (gaudi-pytorch-bridge
``core/step_closure.py``; DeepSpeed ``op_builder/hpu/fused_adam.py``).
"""

from __future__ import annotations

from .. import _not_emulated

__all__ = ["is_lazy", "mark_step"]


def is_lazy() -> bool:
    """Whether the SDK runs in lazy mode (the SDK's module imports ``utils.internal.is_lazy``)."""
    from . import is_lazy as core_is_lazy

    return core_is_lazy()


def mark_step(device_str: str = "", sync: bool = False) -> None:
    """Mark the end of a lazy-mode graph; a no-op in eager mode (``habana_frameworks.torch.core.mark_step``)."""
    from . import mark_step as core_mark_step

    core_mark_step(device_str, sync)


def _mark_step_if_lazy() -> None:
    """Mark a step in lazy mode; nothing in eager mode."""
    if is_lazy():
        mark_step()


_not_emulated.provide(globals(), "habana_frameworks.torch.core.step_closure")
