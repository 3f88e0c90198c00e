"""A software emulator of Graphcore's ``poptorch`` with its observable semantics, in pure PyTorch.

With ``LIGHTNING_ACCEL_EMULATE`` including ``ipu`` it answers ``import poptorch`` (and ``poptorch.optim``) and is
what :mod:`lightning_accel.graphcore.sdk` hands out, even where the real poptorch is installed: an explicit request
to emulate wins. It emulates ``LIGHTNING_ACCEL_EMULATED_DEVICES`` IPUs (default 8) on the backing device.
What it reproduces and where it differs from hardware is listed in the package README.

Example:
    >>> import torch
    >>> from lightning_accel.graphcore import _emulator as poptorch
    >>> opts = poptorch.Options().deviceIterations(2)
    >>> model = poptorch.inferenceModel(torch.nn.Linear(3, 1), opts)
    >>> model(torch.ones(4, 3)).shape
    torch.Size([4, 1])
    >>> model.destroy()
"""

from __future__ import annotations

from . import optim
from .blocks import BeginBlock, Block, BlockFunction, LegacyBeginBlockFn
from .dataloader import AsynchronousDataAccessor, DataLoader
from .device import ipuHardwareIsAvailable, ipuHardwareVersion
from .enums import (
    AutoStage,
    CommGroupType,
    ConnectionType,
    DataLoaderMode,
    HalfFloatCastingBehavior,
    Liveness,
    MatMulSerializationMode,
    MeanReductionStrategy,
    MultiConvPlanType,
    OutputMode,
    OverlapMode,
    ReductionType,
    SharingStrategy,
    SyncPattern,
    VariableRetrievalMode,
)
from .errors import Error
from .execution import PipelinedExecution, ShardedExecution, Stage
from .executor import PoplarExecutor, inferenceModel, trainingModel
from .ops import identity_loss
from .options import Options

__all__ = [
    "VariableRetrievalMode",
    "SyncPattern",
    "SharingStrategy",
    "OverlapMode",
    "MultiConvPlanType",
    "MeanReductionStrategy",
    "MatMulSerializationMode",
    "Liveness",
    "HalfFloatCastingBehavior",
    "ConnectionType",
    "CommGroupType",
    "AsynchronousDataAccessor",
    "AutoStage",
    "BeginBlock",
    "Block",
    "BlockFunction",
    "DataLoader",
    "DataLoaderMode",
    "Error",
    "LegacyBeginBlockFn",
    "Options",
    "OutputMode",
    "PipelinedExecution",
    "PoplarExecutor",
    "ReductionType",
    "ShardedExecution",
    "Stage",
    "__version__",
    "identity_loss",
    "inferenceModel",
    "ipuHardwareIsAvailable",
    "ipuHardwareVersion",
    "optim",
    "trainingModel",
]

# The poptorch release whose semantics are emulated.
__version__ = "3.4.0+lightning-accel-emulator"
