"""Emulation of ``transformer_engine.numerics_debug``: counting fp8 overflows and underflows.

Source: gaudi-pytorch-bridge 1.18.0, ``hpex/experimental/transformer_engine/numerics_debug.py``.
``fp8_tensor_statistics(tensor, fp8_format)`` returns ``(underflows, overflows)``: how many values are 0 and how many
equal the format's largest value (``recipe.Format``: 240 for E4M3, 57344 for E5M2).

Example:
    >>> from habana_frameworks.torch.hpex.experimental.transformer_engine import numerics_debug
    >>> numerics_debug.fp8_tensor_statistics(torch.tensor([0.0, 240.0, 1.0]), "E4M3")  # doctest: +SKIP
    (1, 1)
"""

from __future__ import annotations

import torch

from . import recipe as recipe

__all__ = ["debug", "fp8_tensor_statistics"]

_NUMERICS_DEBUG = False


def debug(enabled: bool = True) -> None:
    """Switch fp8 debug mode on or off."""
    global _NUMERICS_DEBUG
    _NUMERICS_DEBUG = enabled


def fp8_tensor_statistics(tensor: torch.Tensor, fp8_format: str = "E4M3") -> tuple[int, ...]:
    """``(underflows, overflows)`` of ``tensor``: its zeros and its values at the format's largest value."""
    fp8_format = fp8_format.upper()
    assert fp8_format in ("E4M3", "E5M2"), "fp8_format must be 'E4M3' or 'E5M2' for amax"
    largest = recipe.Format[fp8_format].value.max_fwd
    return (int((tensor == 0).sum().item()), int((tensor == largest).sum().item()))
