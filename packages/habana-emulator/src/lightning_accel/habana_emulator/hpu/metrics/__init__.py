"""Emulation of ``habana_frameworks.torch.hpu.metrics``: ``metric_global``, ``metric_localcontext``, ``metrics_dump``.

What each metric counts on the emulator is in :mod:`.metrics`.
"""

from __future__ import annotations

from .exceptions import MetricNotFoundError
from .metrics import metric_global, metric_localcontext, metrics_dump

__all__ = ["MetricNotFoundError", "metric_global", "metric_localcontext", "metrics_dump"]
