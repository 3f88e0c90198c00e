"""The host optimizer of an IPU run reads no parameter between steps.

poptorch trains on the device: the host optimizer only carries the hyper-parameters (which learning-rate schedulers
change) and the step hooks. On IPUs, reading any attribute of a parameter of the model poptorch trains (``.grad``,
which ``zero_grad`` and ``step`` read for every parameter) copies every weight from the device to the host
(poptorch 3.4 ``python/_poplar_executor.py:319-333``, ``copyWeightsToHostIfNeeded``, ``:543-553``). So the host
optimizer's ``step`` and ``zero_grad`` run with groups that hold no parameters: no gradient exists on the host to
clear or to apply, since backward runs on the device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["install_parameterless_zero_grad", "remove_parameterless_zero_grad", "without_parameters"]


@contextlib.contextmanager
def without_parameters(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Meanwhile, ``optimizer``'s parameter groups hold no parameters (their hyper-parameters stay).

    Example:
        >>> optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
        >>> with without_parameters(optimizer):
        ...     optimizer.step()
        >>> len(optimizer.param_groups[0]["params"])
        2
    """
    saved = [group["params"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["params"] = []
    try:
        yield
    finally:
        for group, params in zip(optimizer.param_groups, saved):
            group["params"] = params


def install_parameterless_zero_grad(optimizer: torch.optim.Optimizer) -> None:
    """Make ``optimizer.zero_grad()`` (Lightning calls it before every step) run :func:`without_parameters`."""
    if "zero_grad" in vars(optimizer):
        return
    original = optimizer.zero_grad

    def zero_grad(set_to_none: bool = True) -> Any:
        with without_parameters(optimizer):
            return original(set_to_none)

    optimizer.zero_grad = zero_grad  # type: ignore[method-assign]


def remove_parameterless_zero_grad(optimizer: torch.optim.Optimizer) -> None:
    """Give ``optimizer`` back its own ``zero_grad``."""
    vars(optimizer).pop("zero_grad", None)
