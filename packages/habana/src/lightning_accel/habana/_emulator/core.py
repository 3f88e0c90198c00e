"""Emulation of ``habana_frameworks.torch.core`` (imported by users as ``htcore``).

On Gaudi, lazy mode (the default, ``PT_HPU_LAZY_MODE=1``) accumulates operations into a graph that runs when
``mark_step()`` is called; in eager mode (``PT_HPU_LAZY_MODE=0``) ``mark_step`` does nothing. The backing device
executes every operation eagerly, so here ``mark_step`` cannot change results: it records that a graph boundary was
reached and, with ``sync=True``, waits for the backing device.
"""

from __future__ import annotations

import os
import threading

from . import hpu

__all__ = ["hpu", "is_lazy", "mark_step"]

LAZY_MODE_VAR = "PT_HPU_LAZY_MODE"

_lock = threading.Lock()
_marked_steps = 0


def is_lazy() -> bool:
    """Whether lazy mode is on: ``PT_HPU_LAZY_MODE`` unset or anything but ``"0"`` (the SDK's default is lazy)."""
    return os.environ.get(LAZY_MODE_VAR, "1").strip() != "0"


def mark_step(device_str: str = "", sync: bool = False) -> None:
    """Mark the end of a lazy-mode graph; a no-op in eager mode, as on the SDK.

    Args:
        device_str: Accepted for signature compatibility with the SDK; ignored.
        sync: Wait until the backing device has finished the queued work.
    """
    global _marked_steps
    if not is_lazy():
        return
    with _lock:
        _marked_steps += 1
    if sync:
        hpu.synchronize()


def marked_steps() -> int:
    """Emulator only (not an SDK name): how many graph boundaries ``mark_step`` has recorded in this process."""
    return _marked_steps
