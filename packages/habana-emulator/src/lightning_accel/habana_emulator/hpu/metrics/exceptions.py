"""Emulation of ``habana_frameworks.torch.hpu.metrics.exceptions``.

At bcc5172 the module has one class; 1.19's ``MetricNotFound``, ``InvalidMetricDumpFileFormat`` and
``InvalidMetricDumpTrigger`` are gone.
"""

from __future__ import annotations

__all__ = ["MetricNotFoundError"]


class MetricNotFoundError(Exception):
    """``metric_localcontext`` was given a name no metric is registered under (``metrics.py``, ``get_local_metric``)."""
