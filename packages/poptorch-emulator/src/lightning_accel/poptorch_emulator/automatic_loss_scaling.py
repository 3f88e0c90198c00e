"""PopART's automatic loss scaling, as ``Options.Training.setAutomaticLossScaling(True)`` turns it on.

The loss is scaled by the optimizer's ``loss_scaling`` times an update factor (PopART's ``finalLossScale``); the
factor starts at 1, is part of the optimizer state (``ipu_state["lossScaleUpdateFactor"]``, poptorch's
``tests/options_test.py::test_automatic_loss_scaling``) and, after each weight update, is halved when the share of
scaled float16 gradient elements at or above a bin edge exceeds a threshold, and doubled otherwise
(``popx/op/lossscaleupdatex.cpp``: scale down when ``upper > t / (1 - t) * lower``). The bin edge is
``binEdgeLocation`` (default 1/16) of float16's largest value and the threshold ``thresholdUpperCountProportion``
(default 1e-7), from PopART's ``AutomaticLossScalingSettings``; float32 gradients are not counted.

PopART counts the gradients of the outputs of its matmuls and convolutions; the emulator sees only the weights'
gradients, so it counts those. Without any float16 gradient there is nothing to count, and the factor stays.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = ["UPDATE_FACTOR", "updated_factor"]

UPDATE_FACTOR = "lossScaleUpdateFactor"
_SETTINGS = "automaticLossScalingSettings."
_FLOAT16_MAX = float(torch.finfo(torch.float16).max)
log = logging.getLogger("poptorch")


def _setting(options: Any, name: str, default: float) -> float:
    value = options._Popart.options.get(_SETTINGS + name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"poptorch.Options()._Popart: {_SETTINGS}{name} must be a number, got {value!r}; leave it unset for "
            f"PopART's default ({default})."
        )
    return float(value)


def updated_factor(factor: float, grads: list[torch.Tensor], options: Any) -> float:
    """The update factor after a weight update whose scaled gradients are ``grads``.

    Raises:
        ValueError: For a ``thresholdUpperCountProportion`` outside [0, 1] (PopART's check) or a setting that is not
            a number.
    """
    threshold = _setting(options, "thresholdUpperCountProportion", 1e-7)
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(
            f"Out of range value for 'thresholdUpperCountProportion'. The current value is {threshold}, but it should "
            "be in the range [0, 1]."
        )
    edge = _setting(options, "binEdgeLocation", 0.0625) * _FLOAT16_MAX
    halves = [g for g in grads if g.dtype == torch.float16]
    if not halves:
        log.debug("Automatic loss scaling: no float16 gradient to count; %s stays %s", UPDATE_FACTOR, factor)
        return factor
    upper = sum(int((g.float().abs() >= edge).sum()) for g in halves)
    total = sum(g.numel() for g in halves)
    lower = total - upper
    if threshold == 1.0:
        return factor * 2.0
    return factor * 0.5 if upper > threshold / (1.0 - threshold) * lower else factor * 2.0
