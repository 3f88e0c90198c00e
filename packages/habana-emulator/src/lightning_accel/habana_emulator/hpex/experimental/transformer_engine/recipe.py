"""Emulation of ``transformer_engine.recipe``: the fp8 formats and the delayed-scaling recipe.

Source: gaudi-pytorch-bridge 1.18.0 (``f90046f``), ``hpex/experimental/transformer_engine/recipe.py`` (the newest
release with the Transformer Engine in the bridge's sources; from 1.19 the bridge re-exports the separate
``intel_transformer_engine``). Rules taken from there:

- ``Format.E4M3`` has the largest value 240 (Gaudi2's e4m3), ``E5M2`` 57344, ``HYBRID`` E4M3 forward and E5M2
  backward;
- ``DelayedScaling`` defaults: ``margin=0``, ``interval=1``, ``fp8_format=Format.E5M2``, ``amax_history_len=1``,
  ``amax_compute_algo="most_recent"``, ``reduce_amax=True``; only ``E5M2`` and ``HYBRID`` train (an
  ``AssertionError`` otherwise), and no ``override_linear_precision``.

The SDK's recipe is a pydantic dataclass; the emulator's checks the same fields with plain Python and raises the
SDK's ``AssertionError`` for the SDK's two rules, a ``ValueError`` naming the field for the rest.

Example:
    >>> from habana_frameworks.torch.hpex.experimental.transformer_engine.recipe import DelayedScaling, Format
    >>> DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

__all__ = ["DelayedScaling", "Format"]


class _FormatHelper(NamedTuple):
    max_fwd: float
    max_bwd: float


class Format(Enum):
    """The fp8 formats: ``E4M3``, ``E5M2``, and ``HYBRID`` (E4M3 in the forward pass, E5M2 for gradients)."""

    E4M3 = _FormatHelper(max_fwd=240.0, max_bwd=240.0)
    E5M2 = _FormatHelper(max_fwd=57344.0, max_bwd=57344.0)
    HYBRID = _FormatHelper(max_fwd=240.0, max_bwd=57344.0)


class _OverrideLinearPrecision(NamedTuple):
    fprop: bool = False
    dgrad: bool = False
    wgrad: bool = False


@dataclass
class DelayedScaling:
    """Delayed scaling: each fp8 tensor is scaled by a factor computed from the amaxes of earlier steps.

    Args:
        margin: The scale is ``2 ** (floor(log2(fp8_max / amax)) - margin)``.
        interval: The scale is recomputed every ``interval`` training steps.
        fp8_format: ``Format.E5M2`` (the SDK's default) or ``Format.HYBRID``.
        amax_history_len: How many steps' amaxes are kept.
        amax_compute_algo: ``"max"`` (largest in the history), ``"most_recent"``, or a function of the history.
        override_linear_precision: Only ``(False, False, False)``.
        scaling_factor_compute_algo: ``None``, or ``f(amax, scale, fp8_max, recipe)`` returning the new scale.
        reduce_amax: Take the maximum amax over the processes of the ``fp8_group`` (or the default group).
    """

    margin: int = 0
    interval: int = 1
    fp8_format: Format = Format.E5M2
    amax_history_len: int = 1
    amax_compute_algo: Any = "most_recent"
    override_linear_precision: tuple[bool, bool, bool] = field(default_factory=_OverrideLinearPrecision)
    scaling_factor_compute_algo: Callable[..., Any] | None = None
    reduce_amax: bool = True

    def __post_init__(self) -> None:
        for name in ("margin", "interval", "amax_history_len"):
            value = getattr(self, name)
            low = 0 if name == "margin" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"DelayedScaling({name}={value!r}): accepted: an integer >= {low}.")
        if not isinstance(self.fp8_format, Format):
            raise ValueError(
                f"DelayedScaling(fp8_format={self.fp8_format!r}): accepted: a recipe.Format (Format.E5M2 or "
                "Format.HYBRID)."
            )
        if self.amax_compute_algo not in ("max", "most_recent") and not callable(self.amax_compute_algo):
            raise ValueError(
                f"DelayedScaling(amax_compute_algo={self.amax_compute_algo!r}): accepted: 'max', 'most_recent' or a "
                "function of the amax history."
            )
        assert self.fp8_format in (Format.E5M2, Format.HYBRID), "Only E5M2 and HYBRID training are currently supported."
        assert tuple(self.override_linear_precision) == (False, False, False), "No override is currently supported."
