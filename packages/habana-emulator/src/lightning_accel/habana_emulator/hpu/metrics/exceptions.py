"""Emulation of ``habana_frameworks.torch.hpu.metrics.exceptions`` (gaudi-pytorch-bridge 1.19.0, the same classes)."""

from __future__ import annotations

__all__ = ["InvalidMetricDumpFileFormat", "InvalidMetricDumpTrigger", "MetricNotFound"]


class MetricNotFound(Exception):
    """``metric_localcontext`` was given a name no metric is registered under (``metrics.py:88-92``)."""


class InvalidMetricDumpFileFormat(Exception):
    """A metrics dump format the SDK does not know."""


class InvalidMetricDumpTrigger(Exception):
    """A metrics dump trigger the SDK does not know."""
