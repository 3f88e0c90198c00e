"""A software emulator of Graphcore's ``poptorch`` with its observable semantics, in pure PyTorch.

The distribution lightning-accel-poptorch-emulator, installed by ``pip install 'lightning-accel-graphcore[emulator]'``.
With ``LIGHTNING_ACCEL_EMULATE`` including ``ipu`` it answers ``import poptorch`` (and ``poptorch.optim``): its entry
point in ``lightning_accel.emulated_sdks.ipu`` declares the name and lightning-accel-core's import aliases do the rest,
so the Lightning integration (lightning-accel-graphcore) imports ``poptorch`` and never this package. That holds even
where the real poptorch is installed: an explicit request to emulate wins. It emulates
``LIGHTNING_ACCEL_EMULATED_DEVICES`` IPUs (default 8) on the backing device. It has poptorch 3.4's whole public Python
API; the names it does not reproduce are listed, with the reason, in :mod:`.left_out` and raise ``poptorch.Error``
when used. What it reproduces and where it differs from hardware is listed in ``docs/emulator.md``.

Example:
    >>> import torch
    >>> from lightning_accel import poptorch_emulator as poptorch
    >>> opts = poptorch.Options().deviceIterations(2)
    >>> model = poptorch.inferenceModel(torch.nn.Linear(3, 1), opts)
    >>> model(torch.ones(4, 3)).shape
    torch.Size([4, 1])
    >>> model.destroy()
"""

from __future__ import annotations

from . import enums, ops, optim, poptorch_core
from .annotations import (
    ICustomArgParser,
    MultiConv,
    NameScope,
    registerCustomArgParser,
    registerGeometricCustomArgParsers,
)
from .blocks import BeginBlock, Block, BlockFunction, BlockId, LegacyBeginBlockFn, removeBlocks
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
from .errors import Error, RecoverableError, UnrecoverableError
from .execution import (
    ParallelPhasedExecution,
    Phase,
    PipelinedExecution,
    SerialPhasedExecution,
    ShardedExecution,
    Stage,
)
from .executor import PoplarExecutor, inferenceModel, registerPostCompileHook, registerPreCompileHook, trainingModel
from .host_ops import CPU
from .left_out import left_out
from .ops import (
    ATTR_PREFIX,
    attributes_lists,
    cond,
    createPoptorchError,
    dynamic_slice,
    dynamic_update,
    flattenTensorStructure,
    for_loop,
    identity_loss,
    ipu_print_tensor,
    isRunningOnIpu,
    logger,
    module_repr,
    nop,
    poptorchAtExit,
    print,
    recomputationCheckpoint,
    reconstructTensorStructure,
    serializedMatMul,
    set_available_memory,
    set_overlap_for_input,
    set_overlap_for_output,
    setLogLevel,
)
from .options import Attribute, ConfigFileError, Options, TensorLocationSettings

accessAttributes = left_out("poptorch.accessAttributes")
ctc_beam_search_decoder = left_out("poptorch.ctc_beam_search_decoder")
custom_op = left_out("poptorch.custom_op")
fps = left_out("poptorch.fps")
getIpuTensorId = left_out("poptorch.getIpuTensorId")
importPoptorchMetadataFromFile = left_out("poptorch.importPoptorchMetadataFromFile")
load = left_out("poptorch.load")
nearest = left_out("poptorch.nearest")
profiling = left_out("poptorch.profiling")

__all__ = [
    "ATTR_PREFIX",
    "CPU",
    "AsynchronousDataAccessor",
    "Attribute",
    "AutoStage",
    "BeginBlock",
    "Block",
    "BlockFunction",
    "BlockId",
    "CommGroupType",
    "ConfigFileError",
    "ConnectionType",
    "DataLoader",
    "DataLoaderMode",
    "Error",
    "HalfFloatCastingBehavior",
    "ICustomArgParser",
    "LegacyBeginBlockFn",
    "Liveness",
    "MatMulSerializationMode",
    "MeanReductionStrategy",
    "MultiConv",
    "MultiConvPlanType",
    "NameScope",
    "Options",
    "OutputMode",
    "OverlapMode",
    "ParallelPhasedExecution",
    "Phase",
    "PipelinedExecution",
    "PoplarExecutor",
    "RecoverableError",
    "ReductionType",
    "SerialPhasedExecution",
    "ShardedExecution",
    "SharingStrategy",
    "Stage",
    "SyncPattern",
    "TensorLocationSettings",
    "UnrecoverableError",
    "VariableRetrievalMode",
    "__version__",
    "accessAttributes",
    "attributes_lists",
    "cond",
    "createPoptorchError",
    "ctc_beam_search_decoder",
    "custom_op",
    "dynamic_slice",
    "dynamic_update",
    "enums",
    "flattenTensorStructure",
    "for_loop",
    "fps",
    "getIpuTensorId",
    "identity_loss",
    "importPoptorchMetadataFromFile",
    "inferenceModel",
    "ipuHardwareIsAvailable",
    "ipuHardwareVersion",
    "ipu_print_tensor",
    "isRunningOnIpu",
    "load",
    "logger",
    "module_repr",
    "nearest",
    "nop",
    "ops",
    "optim",
    "poptorchAtExit",
    "poptorch_core",
    "print",
    "profiling",
    "recomputationCheckpoint",
    "reconstructTensorStructure",
    "registerCustomArgParser",
    "registerGeometricCustomArgParsers",
    "registerPostCompileHook",
    "registerPreCompileHook",
    "removeBlocks",
    "serializedMatMul",
    "setLogLevel",
    "set_available_memory",
    "set_overlap_for_input",
    "set_overlap_for_output",
    "trainingModel",
]

# The poptorch release whose semantics are emulated.
__version__ = "3.4.0+lightning-accel-emulator"

registerGeometricCustomArgParsers()
