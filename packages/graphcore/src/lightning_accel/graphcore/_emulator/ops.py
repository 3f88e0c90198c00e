"""``poptorch.identity_loss``: mark a value as the model's loss."""

from __future__ import annotations

import torch

from .tracing import current_context

__all__ = ["identity_loss"]

_REDUCTIONS = ("sum", "mean", "none")


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """Mark ``x`` (reduced by ``"sum"``, ``"mean"`` or ``"none"``) as the final loss; backward seeds it with ones.

    Example:
        >>> identity_loss(torch.tensor([1.0, 3.0]), reduction="mean")
        tensor(2.)
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"identity_loss(reduction={reduction!r}) is not accepted: use one of {_REDUCTIONS}.")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"identity_loss takes a tensor, got {type(x).__name__}.")
    out = x.sum() if reduction == "sum" else x.mean() if reduction == "mean" else x * 1
    context = current_context()
    if context is not None:
        context.add_loss(out)
    return out
