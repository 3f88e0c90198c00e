"""Emulation of ``habana_frameworks.torch.hw_utilization_metric``, which the SDK imports when it loads.

(bcc5172 ``__init__.py``.) Its names are those of :mod:`.hw_utilization_metric` (``from .hw_utilization_metric
import *``).
"""

from __future__ import annotations

from .. import _not_emulated
from .hw_utilization_metric import Usage

__all__ = ["Usage"]  # the not-emulated names come from provide() below

_not_emulated.provide(
    globals(),
    "habana_frameworks.torch.hw_utilization_metric",
    listed_in="habana_frameworks.torch.hw_utilization_metric.hw_utilization_metric",
)
