"""Emulation of ``habana_frameworks.torch.core.step_closure``: graph boundaries that only lazy mode has.

DeepSpeed's HPU optimizers call ``htcore.step_closure._mark_step_if_lazy()`` before their update (gaudi-pytorch-bridge
``core/step_closure.py``; DeepSpeed ``op_builder/hpu/fused_adam.py``).
"""

from __future__ import annotations

__all__ = ["_mark_step_if_lazy"]


def _mark_step_if_lazy() -> None:
    """Mark a step in lazy mode; nothing in eager mode."""
    from . import is_lazy, mark_step

    if is_lazy():
        mark_step()
