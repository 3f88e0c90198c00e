"""Emulation of ``habana_frameworks.torch.hpu.sdp_kernel_flag``: the process-wide switch of recompute ``FusedSDPA``.

From the 1.24 period the switch is plain Python in the SDK (``hpu/sdp_kernel_flag.py``; 1.19 kept it in the C++
runtime), so the emulator has it as it is: ``FusedSDPA`` with ``recompute_mode=None`` reads
:func:`recompute_sdp_enabled` (``hpex/kernels/FusedSDPA.py`` at bcc5172). It is on unless a program turns it off.

As in the SDK, ``hpu.is_recompute_FSDPA_enabled`` is the value this module's flag had when ``hpu`` star-imported it
(``True``); the live value is this module's ``is_recompute_FSDPA_enabled``, or :func:`recompute_sdp_enabled`.

Example:
    >>> import habana_frameworks.torch.hpu as hthpu
    >>> with hthpu.sdp_kernel(enable_recompute=False):
    ...     hthpu.recompute_sdp_enabled()
    False
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["enable_recompute_sdp", "is_recompute_FSDPA_enabled", "recompute_sdp_enabled", "sdp_kernel"]

is_recompute_FSDPA_enabled = True


def enable_recompute_sdp(enabled: bool) -> None:
    """Make ``FusedSDPA`` recompute the attention probabilities in backward (``True``) or keep them (``False``).

    ``None``, ``0`` and ``1`` are taken for their truth, as the SDK (which stores the value and tests its truth)
    takes them: libraries pass an unset option (``None``) for "off".

    Raises:
        TypeError: When ``enabled`` is anything else (a string, say), whose truth would not be what was meant.
    """
    global is_recompute_FSDPA_enabled
    if not (enabled is None or (isinstance(enabled, int) and enabled in (0, 1))):
        raise TypeError(
            f"enabled must be True or False (or None for off), got {enabled!r} of type {type(enabled).__name__}."
        )
    is_recompute_FSDPA_enabled = bool(enabled)


def recompute_sdp_enabled() -> bool:
    """Whether ``FusedSDPA`` with ``recompute_mode=None`` uses its recompute variant."""
    return is_recompute_FSDPA_enabled


@contextmanager
def sdp_kernel(enable_recompute: bool = True) -> Iterator[dict[str, Any]]:
    """Inside the block, ``FusedSDPA`` recomputes (``enable_recompute=True``) or not.

    The previous setting returns after the block, also on an exception. Yields an empty dict, as the SDK does.
    """
    previous = recompute_sdp_enabled()
    try:
        enable_recompute_sdp(enable_recompute)
        yield {}
    finally:
        enable_recompute_sdp(previous)
