"""poptorch's enumerations, with poptorch 3.4's members and values (``python/enums.py``)."""

from __future__ import annotations

import enum

__all__ = [
    "AutoStage",
    "CommGroupType",
    "ConnectionType",
    "DataLoaderMode",
    "HalfFloatCastingBehavior",
    "Liveness",
    "MatMulSerializationMode",
    "MeanReductionStrategy",
    "MultiConvPlanType",
    "OutputMode",
    "OverlapMode",
    "ReductionType",
    "SharingStrategy",
    "SyncPattern",
    "VariableRetrievalMode",
]


class MeanReductionStrategy(enum.IntEnum):
    """When a mean reduction divides: ``Running``, ``Post`` (default) or the deprecated ``PostAndLoss``.

    ``Running`` is the default of float16 accumulators; the emulator's float32 results are the same for all three.
    """

    Running = 0
    Post = 1
    PostAndLoss = 2


class DataLoaderMode(enum.IntEnum):
    """How ``poptorch.DataLoader`` loads data; the emulator always loads synchronously (same results)."""

    Sync = 0
    Async = 1
    AsyncRebatched = 2


class SharingStrategy(enum.IntEnum):
    """How an asynchronous loader's worker processes share data."""

    SharedMemory = 0
    FileSystem = 1
    Fork = 2
    ForkServer = 3


class OutputMode(enum.IntEnum):
    """Which results a host call returns (``Options.outputMode``).

    ``Default`` resolves to ``Final`` for training and ``All`` for inference when the executor is built.
    """

    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


class ConnectionType(enum.IntEnum):
    """When to attach to the IPUs (``Options.connectionType``)."""

    Always = 0
    OnDemand = 1
    Never = 2


class HalfFloatCastingBehavior(enum.IntEnum):
    """Deprecated in poptorch 3.4: float16 is always up-cast to float32 where they meet."""

    FloatDowncastToHalf = 0
    HalfUpcastToFloat = 1
    Default = 2


class ReductionType(enum.IntEnum):
    """How accumulated and replicated gradients are reduced (``Training.accumulationAndReplicationReductionType``)."""

    Sum = 0
    Mean = 1
    NoReduction = 2


class SyncPattern(enum.IntEnum):
    """How IPUs synchronise with each other and the host (``Options.syncPattern``)."""

    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class MatMulSerializationMode(enum.Enum):
    """Which dimension ``serializedMatMul`` splits."""

    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "none"


class Liveness(enum.IntEnum):
    """When tensors leave the chip between the phases of a phased execution."""

    AlwaysLive = 0
    OffChipAfterFwd = 1
    OffChipAfterFwdNoOverlap = 2
    OffChipAfterEachPhase = 3


class OverlapMode(enum.Enum):
    """How host transfers of an input or output overlap with compute (``set_overlap_for_input``)."""

    NoOverlap = "no_overlap"
    OverlapAccumulationLoop = "overlap_accumulation_loop"
    OverlapDeviceIterationLoop = "overlap_device_iteration_loop"


class AutoStage(enum.IntEnum):
    """How pipeline stages are derived from blocks; ``SameAsIpu`` is poptorch's default."""

    SameAsIpu = 0
    AutoIncrement = 1


class MultiConvPlanType(enum.IntEnum):
    """How the convolutions of a ``MultiConv`` are planned."""

    Parallel = 0
    Serial = 1


class CommGroupType(enum.IntEnum):
    """How replicas are grouped (``Options.inputReplicaGrouping``, per-replica variables)."""

    All = 0
    Consecutive = 1
    Orthogonal = 2
    NoGrouping = 3


class VariableRetrievalMode(enum.IntEnum):
    """Which replicas' copies of a grouped variable are read back to the host."""

    OnePerGroup = 0
    AllReplicas = 2
