"""Emulation of ``habana_frameworks.torch.hw_utilization_metric.hw_utilization_metric`` (SDK 1.24 period).

The SDK's ``HWUtilizationMetrics`` reports how busy the card was: ``hl-smi``'s average utilization and the share of
time the compute stream spent processing events rather than waiting (``utils._utilization_metrics_C``). The emulator
has neither a card to ask nor a compute stream of its own (work runs in issue order on the backing device), so
``HWUtilizationMetrics`` and ``utilization_metrics`` refuse by name when used. ``Usage``, the record of its two
readings, is plain data and is here as in the SDK.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _not_emulated

__all__ = ["Usage"]  # the not-emulated names come from provide() below

_SDK = "habana_frameworks.torch.hw_utilization_metric.hw_utilization_metric"


@dataclass
class Usage:
    """The two utilization readings, in percent: ``hl_smi`` (the card's) and ``esync`` (the compute stream's)."""

    hl_smi: float
    esync: float


_not_emulated.provide(globals(), _SDK)
