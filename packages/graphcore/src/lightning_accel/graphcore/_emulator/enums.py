"""poptorch's enumerations, with poptorch's member values."""

from __future__ import annotations

import enum

__all__ = [
    "AutoStage",
    "DataLoaderMode",
    "OutputMode",
    "ReductionType",
]


class OutputMode(enum.IntEnum):
    """Which results a host call returns (``Options.outputMode``).

    ``Default`` resolves to ``Final`` for training and ``All`` for inference when the executor is built.
    """

    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


class ReductionType(enum.IntEnum):
    """How accumulated and replicated gradients are reduced (``Training.accumulationAndReplicationReductionType``)."""

    Sum = 0
    Mean = 1
    NoReduction = 2


class DataLoaderMode(enum.IntEnum):
    """How ``poptorch.DataLoader`` loads data; the emulator always loads synchronously (same results)."""

    Sync = 0
    Async = 1
    AsyncRebatched = 2


class AutoStage(enum.IntEnum):
    """How pipeline stages are derived from blocks; ``SameAsIpu`` is poptorch's default."""

    SameAsIpu = 0
    AutoIncrement = 1
