"""``poptorch.Options`` and its sub-option classes, with poptorch 3.4's storage, checks and freezing rules.

poptorch's option classes (``python/options.py``, ``python/_options_impl.py``) keep their values in dictionaries
with fixed names; misuse fails poptorch's ``assert`` statements, so it raises ``AssertionError`` here too (an
unknown option, a value of another type than the default's, an enum argument of the wrong type). Options used by a
``DataLoader`` or an executor are frozen (``AttributeError: Can't modify frozen Options``); :meth:`Options.clone`
gives an unfrozen copy. Options that tune the compiler or the hardware (memory proportions, tensor locations,
stochastic rounding, synthetic data, the IPU Model, ...) are recorded and change nothing in the emulator.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from typing import Any

import torch

from .enums import CommGroupType, ConnectionType, MeanReductionStrategy, OutputMode, ReductionType, SyncPattern
from .execution import PipelinedExecution

__all__ = ["Attribute", "ConfigFileError", "Options", "OptionsDict", "TensorLocationSettings"]

log = logging.getLogger("poptorch")
_DEFAULT_SOURCE_LOCATION_EXCLUDES = ["install/poptorch", "site-packages/torch", "site-packages/poptorch"]


class ConfigFileError(Exception):
    """A malformed options file (``Options.loadFromFile``)."""


class Attribute:
    """Context manager setting attributes of the operators created inside it (compiler hints; no effect here).

    Example:
        >>> with Attribute(__outline={"layer": "embedding"}):
        ...     pass
    """

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs

    def __enter__(self) -> Attribute:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class OptionsDict:
    """A dictionary of options with fixed names and types that can be frozen (``_options_impl.py:48-190``).

    Example:
        >>> opts = OptionsDict(size=1)
        >>> opts.set(size=2)
        >>> opts.size
        2
    """

    def __init__(self, **default_values: Any) -> None:
        object.__setattr__(self, "_is_frozen", False)
        object.__setattr__(self, "_values", dict(default_values))

    def set(self, **kwargs: Any) -> None:
        """Set existing options; each value must have the type of the option's default."""
        self.checkIsFrozen()
        for option, value in kwargs.items():
            assert self.exists(option), f"Invalid option {option}, valid options are {self._values.keys()}"
            expected = type(self._values[option])
            assert isinstance(value, expected), (
                f"Unexpected type {type(value)} for option {option}. Expected {expected}"
            )
            self._values[option] = value

    def createOrSet(self, **kwargs: Any) -> None:
        """Set options, adding those that do not exist yet."""
        self.checkIsFrozen()
        for option, value in kwargs.items():
            if option in self._values:
                self.set(**{option: value})
            else:
                self._values[option] = value

    def exists(self, option: str) -> bool:
        """Whether ``option`` is defined."""
        return option in self._values

    def deleteIfExists(self, option: str) -> None:
        """Remove ``option`` if it is defined."""
        if self.exists(option):
            del self._values[option]

    def checkIsFrozen(self, option: str | None = None) -> None:
        """Raise ``AttributeError`` when the options are frozen."""
        if option != "_is_frozen" and self.__dict__.get("_is_frozen", False):
            raise AttributeError("Can't modify frozen Options")

    def update(self, other: dict[str, Any]) -> dict[str, Any]:
        """Merge these options into ``other`` (no name may be in both)."""
        assert not set(self._values).intersection(other), "Can't merge dictionaries, they have some keys in common"
        other.update(self._values)
        return other

    def toDict(self) -> dict[str, Any]:
        """A copy of the option values."""
        return self.update({})

    def _freeze(self) -> None:
        self._set_frozen(True)

    def _unfreeze(self) -> None:
        self._set_frozen(False)

    def _set_frozen(self, frozen: bool) -> None:
        object.__setattr__(self, "_is_frozen", frozen)
        for value in vars(self).values():
            if isinstance(value, (OptionsDict, _PopartOptions)):
                value._set_frozen(frozen)

    def __call__(self, option: str) -> Any:
        return getattr(self, option)

    def __getattr__(self, option: str) -> Any:
        values = self.__dict__.get("_values", {})
        if option in values:
            return values[option]
        raise AttributeError(f"Invalid attribute {option}.")

    def __setattr__(self, option: str, value: Any) -> None:
        self.checkIsFrozen(option)
        if option.startswith("_"):
            # A private attribute is declared before _values (_options_impl.py:146-154).
            if "_values" in self.__dict__ and option not in self.__dict__:
                raise AttributeError(f"Invalid private attribute {option}. Valid attributes: {list(self.__dict__)}")
            object.__setattr__(self, option, value)
        else:
            self.set(**{option: value})

    def __deepcopy__(self, memo: dict[int, Any]) -> OptionsDict:
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        for key, value in vars(self).items():
            object.__setattr__(clone, key, False if key == "_is_frozen" else copy.deepcopy(value, memo))
        return clone

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"


class _PopartOptions:
    """Backend options (``Options._Popart``): ``set(name, value)``, engine options and patterns."""

    def __init__(self) -> None:
        self._is_frozen = False
        self.options: dict[str, Any] = {}
        self.set("instrumentWithHardwareCycleCounter", False)
        self.set("rearrangeAnchorsOnHost", False)

    def _set_frozen(self, frozen: bool) -> None:
        self._is_frozen = frozen

    def __deepcopy__(self, memo: dict[int, Any]) -> _PopartOptions:
        clone = _PopartOptions()
        memo[id(self)] = clone
        clone.options = copy.deepcopy(self.options, memo)
        return clone

    def checkIsFrozen(self, option: str | None = None) -> None:
        """Raise ``AttributeError`` when the options are frozen."""
        if option != "_is_frozen" and self._is_frozen:
            raise AttributeError("Can't modify frozen Options")

    def set(self, key: str, value: Any) -> _PopartOptions:
        """Set the backend option ``key``."""
        self.checkIsFrozen()
        self.options[key] = value
        return self

    def setEngineOptions(self, engine_options: dict[str, str]) -> _PopartOptions:
        """Set Poplar's engine options."""
        return self.set("engineOptions", engine_options)

    def setPatterns(self, patterns: dict[str, bool], level: int = 2) -> _PopartOptions:
        """Switch PopART graph patterns on or off."""
        assert isinstance(level, int)
        assert isinstance(patterns, dict)
        self.set("patterns_level", level)
        return self.set("patterns", patterns)

    def __repr__(self) -> str:
        return f"_PopartOptions({', '.join(f'{k}={v!r}' for k, v in self.options.items())})"


class _JitOptions(OptionsDict):
    """``Options.Jit``: only ``traceModel(False)`` remains in poptorch 3.4."""

    def traceModel(self, trace_model: bool) -> _JitOptions:
        """Deprecated; ``True`` (TorchScript tracing) is refused as in poptorch 3.4 (``options.py:57-68``)."""
        log.warning("[Deprecated] Do not call options.Jit.traceModel(): options.Jit.traceModel(False) is the default.")
        if trace_model:
            raise ValueError("options.Jit.traceModel(True) is no longer supported")
        return self


class _PrecisionOptions(OptionsDict):
    """``Options.Precision``: numerics of the IPU (recorded; the emulator computes as PyTorch does)."""

    def __init__(self, popart_options: _PopartOptions) -> None:
        super().__init__()
        object.__setattr__(self, "_popart_options", popart_options)

    def halfFloatCasting(self, half_float_casting: Any) -> _PrecisionOptions:
        """Deprecated: float16 meeting float32 is always up-cast, as in PyTorch."""
        log.warning("[Deprecated] Do not call options.Precision.halfFloatCasting(): HalfUpcastToFloat is the only one.")
        return self

    def runningStatisticsAlwaysFloat(self, value: bool) -> _PrecisionOptions:
        """Deprecated: running statistics keep the model's type."""
        if not isinstance(value, bool):
            raise ValueError("runningStatisticsAlwaysFloat needs to be set to a bool")
        log.warning("[Deprecated] Do not call options.Precision.runningStatisticsAlwaysFloat().")
        return self

    def enableFloatingPointExceptions(self, enabled: bool) -> _PrecisionOptions:
        """Trap floating-point exceptions on the IPU."""
        assert isinstance(enabled, bool), "enableFloatingPointExceptions needs to be set to a bool"
        self._popart_options.set("enableFloatingPointChecks", enabled)
        return self

    def enableStochasticRounding(self, enabled: bool) -> _PrecisionOptions:
        """Round float16 results stochastically on the IPU."""
        self._popart_options.set("enableStochasticRounding", enabled)
        return self

    def setPartialsType(self, dtype: torch.dtype) -> _PrecisionOptions:
        """The type of the partial sums of matrix products and convolutions: ``torch.float`` or ``torch.half``."""
        if dtype in (torch.float, torch.float32):
            name = "float"
        elif dtype in (torch.half, torch.float16):
            name = "half"
        else:
            # poptorch's text, without a space between "either" and "torch" (options.py:187-188)
            raise ValueError("parameter to setPartialsType should be eithertorch.float or torch.half")
        self._popart_options.set("partialsTypeMatMuls", name)
        self._popart_options.set("convolutionOptions", {"partialsType": name})
        return self


class _TrainingOptions(OptionsDict):
    """``Options.Training``: gradient accumulation, its reduction, and automatic loss scaling.

    Example:
        >>> Options().Training.gradientAccumulation(4).gradient_accumulation
        4
    """

    def __init__(self, popart_options: _PopartOptions) -> None:
        super().__init__(
            gradient_accumulation=1,
            accumulation_and_replication_reduction_type=ReductionType.Mean,
            meanAccumulationAndReplicationReductionStrategy=MeanReductionStrategy.Post,
        )
        object.__setattr__(self, "_popart_options", popart_options)

    def gradientAccumulation(self, gradient_accumulation: int) -> _TrainingOptions:
        """Number of micro-batches whose gradients are accumulated before each weight update."""
        self.set(gradient_accumulation=gradient_accumulation)
        return self

    def accumulationAndReplicationReductionType(self, reduction_type: ReductionType) -> _TrainingOptions:
        """Reduce accumulated and replicated gradients by ``ReductionType.Mean`` (default) or ``Sum``."""
        if not isinstance(reduction_type, ReductionType) or reduction_type == ReductionType.NoReduction:
            raise ValueError(
                "accumulationAndReplicationReductionType must be set to poptorch.ReductionType.Mean or "
                "poptorch.ReductionType.Sum"
            )
        self.set(accumulation_and_replication_reduction_type=reduction_type)
        return self

    def setMeanAccumulationAndReplicationReductionStrategy(
        self, mean_reduction_strategy: MeanReductionStrategy
    ) -> _TrainingOptions:
        """When a mean reduction divides (``options.py:307-334``); float32 results do not depend on it."""
        self.set(meanAccumulationAndReplicationReductionStrategy=mean_reduction_strategy)
        return self

    def setAutomaticLossScaling(self, enabled: bool) -> _TrainingOptions:
        """Let the IPU adapt the loss scale during training (poptorch 3.4 ``options.py:336-357``, a preview).

        It makes the optimizer's ``loss_scaling`` variable, multiplied by PopART's update factor, which
        :mod:`.automatic_loss_scaling` updates after each weight update.
        """
        self._popart_options.set("automaticLossScalingSettings.enabled", enabled)
        return self

    def setConvolutionDithering(self, enabled: bool) -> _TrainingOptions:
        """Lay convolutions out from different tiles (tile balance; no effect here)."""
        self._popart_options.set("convolutionOptions", {"enableConvDithering": enabled})
        return self


class _DistributedOptions(OptionsDict):
    """``Options.Distributed``: the process of a multi-host run (read from ``OMPI_COMM_WORLD_*`` by default)."""

    def __init__(self) -> None:
        super().__init__(num_distributed_processes=1, distributed_process_id=0, ipuof_configs={})
        self.setEnvVarNames("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")

    def disable(self) -> _DistributedOptions:
        """One process."""
        self.set(num_distributed_processes=1, distributed_process_id=0)
        return self

    def setEnvVarNames(self, var_num_processes: str, var_process_id: str) -> _DistributedOptions:
        """Read the process count and id from these environment variables."""
        return self.configureProcessId(
            int(os.environ.get(var_process_id, "0")), int(os.environ.get(var_num_processes, "1"))
        )

    def configureProcessId(self, process_id: int, num_processes: int) -> _DistributedOptions:
        """Set the process id and count."""
        self.set(distributed_process_id=process_id)
        self.set(num_distributed_processes=num_processes)
        return self

    @property
    def processId(self) -> int:
        """This process's id."""
        return int(self.distributed_process_id)

    @property
    def numProcesses(self) -> int:
        """The number of processes."""
        return int(self.num_distributed_processes)


class TensorLocationSettings(OptionsDict):
    """Where a kind of tensor lives (on chip, in streaming memory, sharded over replicas); no effect here.

    Example:
        >>> TensorLocationSettings().useOnChipStorage(False).toDict()
        {'onChip': 0}
    """

    def minElementsForOffChip(self, min_elements: int) -> TensorLocationSettings:
        """Smallest tensor kept off chip."""
        assert isinstance(min_elements, int)
        self.createOrSet(minElementsForOffChip=min_elements)
        return self

    def minElementsForReplicatedTensorSharding(self, min_elements: int) -> TensorLocationSettings:
        """Smallest tensor sharded over replicas."""
        assert isinstance(min_elements, int)
        self.createOrSet(minElementsForReplicatedTensorSharding=min_elements)
        return self

    def useOnChipStorage(self, use: bool = True) -> TensorLocationSettings:
        """Keep the tensors on chip (``None``: the compiler decides)."""
        if use is None:
            self.deleteIfExists("onChip")
        else:
            assert isinstance(use, bool)
            self.createOrSet(onChip=int(use))
        return self

    def useReplicatedTensorSharding(self, use: bool = True) -> TensorLocationSettings:
        """Shard the tensors over replicas."""
        assert isinstance(use, bool)
        self.createOrSet(useReplicatedTensorSharding=int(use))
        return self

    def useIOTilesToLoad(self, use: bool = True) -> TensorLocationSettings:
        """Load through IO tiles."""
        assert isinstance(use, bool)
        self.createOrSet(useIOTilesToLoad=int(use))
        return self

    def useIOTilesToStore(self, use: bool = True) -> TensorLocationSettings:
        """Store through IO tiles."""
        assert isinstance(use, bool)
        self.createOrSet(useIOTilesToStore=int(use))
        return self


class _TensorLocationOptions(OptionsDict):
    """``Options.TensorLocations``: where activations, weights, optimizer state and accumulators live."""

    def numIOTiles(self, num_tiles: int) -> _TensorLocationOptions:
        """Tiles reserved for IO: an even number from 32 to 192."""
        assert isinstance(num_tiles, int)
        message = "numIOTiles must be an even number between 32 and 192."
        assert 32 <= num_tiles <= 192 and num_tiles % 2 == 0, message
        self.createOrSet(numIOTiles=num_tiles)
        return self

    def _location(self, name: str, location: TensorLocationSettings) -> _TensorLocationOptions:
        assert isinstance(location, TensorLocationSettings)
        self.createOrSet(**{name: location.toDict()})
        return self

    def setActivationLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        """Where activations live."""
        return self._location("location_activation", location)

    def setWeightLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        """Where weights live."""
        return self._location("location_weight", location)

    def setOptimizerLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        """Where optimizer state lives."""
        return self._location("location_optimizer", location)

    def setAccumulatorLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        """Where gradient accumulators live."""
        return self._location("location_accumulator", location)


class Options(OptionsDict):
    """``poptorch.Options``: how a model is batched, replicated and compiled.

    The constructor applies ``POPTORCH_CACHE_DIR`` and ``POPTORCH_DEFAULT_OPTIONS`` (a JSON object of
    ``{"accessor.path": value}``) from the environment, as poptorch 3.4 does (``options.py:1160-1198``).

    Example:
        >>> opts = Options().deviceIterations(4).replicationFactor(2)
        >>> opts.Training.gradientAccumulation(2).gradient_accumulation
        2
        >>> opts.device_iterations * opts.replication_factor * opts.Training.gradient_accumulation
        16
    """

    def __init__(self) -> None:
        popart = _PopartOptions()
        object.__setattr__(self, "_popart", popart)
        object.__setattr__(self, "_jit", _JitOptions())
        object.__setattr__(self, "_graphProcessing", _PrecisionOptions(popart))
        object.__setattr__(self, "_training", _TrainingOptions(popart))
        object.__setattr__(self, "_distributed", _DistributedOptions())
        object.__setattr__(self, "_tensor_locations", _TensorLocationOptions())
        object.__setattr__(self, "_execution_strategy", PipelinedExecution())
        object.__setattr__(self, "_source_location_excludes", list(_DEFAULT_SOURCE_LOCATION_EXCLUDES))
        object.__setattr__(self, "_relax_optimizer_checks", False)
        object.__setattr__(self, "_show_compilation_progress_bar", True)
        object.__setattr__(self, "_module_namescope_enabled", True)
        super().__init__(
            replication_factor=1,
            input_group_size=1,
            input_cgt=CommGroupType.Consecutive,
            broadcast_buffers=True,
            device_iterations=1,
            log_dir=".",
            max_repeat_logs=4,
            auto_round_num_ipus=False,
            anchored_tensors={},
            output_mode=OutputMode.Default.value,
            output_return_period=1,
            connection_type=ConnectionType.Always.value,
            sync_pattern=SyncPattern.Full.value,
            available_memory_proportion={},
        )
        path = os.environ.get("POPTORCH_CACHE_DIR", "")
        if path:
            self.enableExecutableCaching(path)
        self.from_json(os.environ.get("POPTORCH_DEFAULT_OPTIONS", "{}"))

    # -- sub-options -------------------------------------------------------------------------------------------

    @property
    def TensorLocations(self) -> _TensorLocationOptions:
        """Where tensors live."""
        return self._tensor_locations

    @property
    def Distributed(self) -> _DistributedOptions:
        """The process of a multi-host run."""
        return self._distributed

    @property
    def Jit(self) -> _JitOptions:
        """Deprecated tracing options."""
        return self._jit

    @property
    def Precision(self) -> _PrecisionOptions:
        """Numerics of the IPU."""
        return self._graphProcessing

    @property
    def Training(self) -> _TrainingOptions:
        """Gradient accumulation, its reduction and automatic loss scaling."""
        return self._training

    @property
    def _Popart(self) -> _PopartOptions:
        return self._popart

    # -- configuration -----------------------------------------------------------------------------------------

    def from_json(self, string: str) -> Options:
        """Apply ``{"name.of.accessor": value}`` pairs; ``"Enum.Member"`` strings name poptorch enum members."""
        from . import enums

        for option, value in json.loads(string).items():
            target: Any = self
            for attribute in option.split("."):
                target = getattr(target, attribute)
            if isinstance(value, str) and value.count(".") == 1:
                enum_name, member = value.split(".")
                value = getattr(getattr(enums, enum_name, None), member, value)
            if isinstance(value, list):
                target(*value)
            else:
                target(value)
        return self

    def loadFromFile(self, filepath: str) -> Options:
        """Run each line of the file as a call on these options, e.g. ``Training.gradientAccumulation(4)``.

        As poptorch 3.4 does (``_options_config.py``): blank and ``#`` lines are skipped, every other line is
        executed as ``options.<line>`` with ``poptorch`` in scope; a syntax error raises :class:`ConfigFileError`.
        """
        from lightning_accel import poptorch_emulator

        with open(filepath, encoding="utf-8") as handle:
            lines = [line.strip() for line in handle]
        code = "\n".join(f"options.{line}" for line in lines if line and not line.startswith("#"))
        try:
            exec(code, {}, {"poptorch": poptorch_emulator, "options": self})
        except SyntaxError as err:
            where = f"line {err.lineno} of {os.path.basename(filepath)}"
            raise ConfigFileError(f"{type(err).__name__} at {where}: {err.args[0]}\n> {err.text}") from err
        return self

    def sourceLocationExcludes(self, excludes: list[str]) -> Options:
        """Paths left out of the source locations of operators."""
        self._source_location_excludes = excludes
        return self

    def appendToLocationExcludes(self, *excludes: str) -> Options:
        """Add paths to :meth:`sourceLocationExcludes`."""
        self._source_location_excludes = [*self._source_location_excludes, *excludes]
        return self

    def showCompilationProgressBar(self, show: bool = True) -> Options:
        """Show a progress bar while compiling (compiling takes no time here)."""
        self._show_compilation_progress_bar = show
        return self

    def relaxOptimizerAttributesChecks(self, relax: bool = True) -> Options:
        """Log unexpected optimizer attributes at debug level instead of as warnings."""
        self._relax_optimizer_checks = relax
        return self

    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> Options:
        """Reserve the next power of two IPUs instead of failing when the model uses another count."""
        self.set(auto_round_num_ipus=auto_round_num_ipus)
        return self

    def deviceIterations(self, device_iterations: int) -> Options:
        """Number of training (or inference) iterations the device runs per host call."""
        self.set(device_iterations=device_iterations)
        return self

    def setExecutionStrategy(self, strategy: PipelinedExecution) -> Options:
        """How the stages of a multi-IPU model run (pipelined, sharded or phased)."""
        assert isinstance(strategy, PipelinedExecution)
        self.checkIsFrozen()
        self._execution_strategy = strategy
        return self

    def setAvailableMemoryProportion(self, available_memory_proportion: dict[str, float]) -> Options:
        """Memory per IPU for temporary values, as ``{"IPU0": 0.3, ...}`` (no effect here)."""
        memory = {}
        for key, proportion in available_memory_proportion.items():
            assert key.startswith("IPU"), (
                'Available memory proportions are expected to be in a dictionary of {"IPU0": 0.5} where the 0 in IPU '
                f"is the index of the IPU. Invalid key: {key}"
            )
            memory[int(key[3:])] = proportion
        self.createOrSet(available_memory_proportion=memory)
        return self

    def replicationFactor(self, replication_factor: int) -> Options:
        """Number of data-parallel replicas of the model."""
        self.set(replication_factor=replication_factor)
        return self

    def inputReplicaGrouping(self, input_group_size: int, input_group_type: CommGroupType) -> Options:
        """Replicas in a group of ``input_group_size`` take the same input (``options.py:1474-1506``)."""
        if input_group_type == CommGroupType.NoGrouping:
            input_group_size, input_group_type = 1, CommGroupType.Consecutive
        if input_group_type == CommGroupType.All:
            raise ValueError("input_group_type cannot be All")
        if self.replication_factor < input_group_size:
            raise ValueError("input_group_size cannot be larger than replication_factor")
        if self.replication_factor % input_group_size != 0:
            raise ValueError("input_group_size must be a factor of replication_factor")
        self.set(input_group_size=input_group_size)
        self.set(input_cgt=input_group_type)
        return self

    def broadcastBuffers(self, broadcast_buffers: bool = True) -> Options:
        """Broadcast replica 0's buffers to the others before each call."""
        self.set(broadcast_buffers=broadcast_buffers)
        return self

    def logDir(self, log_dir: str) -> Options:
        """Where poptorch writes its logs."""
        self.set(log_dir=log_dir)
        return self

    def maxRepeatLogs(self, max_lines: int | None) -> Options:
        """How many times a repeated log line is printed (``None``: always)."""
        self.set(max_repeat_logs=(1 << 64) - 1 if max_lines is None else max_lines)
        return self

    def modelName(self, name: str) -> Options:
        """Name of the model; the sub-directory of the report directory that its profile goes to."""
        self.createOrSet(model_name=name)
        return self

    def enableExecutableCaching(self, path: str) -> Options:
        """Cache compiled executables in ``path`` (``None`` turns caching off)."""
        if path is None:
            self._Popart.set("enableEngineCaching", False)
        else:
            self._Popart.set("cachePath", path)
            self._Popart.set("enableEngineCaching", True)
        return self

    def useIpuModel(self, use_model: bool) -> Options:
        """Run on the IPU Model, Poplar's simulator of an IPU (``POPTORCH_IPU_MODEL``); the emulator is neither."""
        self.createOrSet(use_model=use_model)
        return self

    def connectionType(self, connection_type: ConnectionType) -> Options:
        """When to attach to the IPUs."""
        assert isinstance(connection_type, ConnectionType)
        self.set(connection_type=connection_type.value)
        return self

    def syncPattern(self, sync_pattern: SyncPattern) -> Options:
        """How the IPUs synchronise with each other and the host."""
        assert isinstance(sync_pattern, SyncPattern)
        self.set(sync_pattern=sync_pattern.value)
        return self

    def useIpuId(self, ipu_id: int) -> Options:
        """Use this IPU (or multi-IPU device id)."""
        assert isinstance(ipu_id, int)
        self.createOrSet(ipu_id=ipu_id)
        return self

    def useOfflineIpuTarget(self, ipu_version: int = 2) -> Options:
        """Compile for an IPU version without attaching to one."""
        self.connectionType(ConnectionType.Never)
        self.createOrSet(ipu_version=ipu_version)
        return self

    def anchorTensor(
        self,
        short_name: str,
        long_name: str,
        output_mode: OutputMode | None = None,
        output_return_period: int | None = 1,
    ) -> None:
        """Return the tensor ``long_name`` of the graph as well (read with ``PoplarExecutor.getAnchoredTensor``)."""
        if output_mode != OutputMode.EveryN:
            output_return_period = 1
        self.anchored_tensors[short_name] = [long_name, output_mode is None, output_mode, output_return_period]

    def outputMode(self, output_mode: OutputMode, output_return_period: int | None = None) -> Options:
        """Which results a host call returns: ``All``, ``Final``, ``Sum``, ``EveryN`` (with a period) or ``Default``."""
        assert isinstance(output_mode, OutputMode)
        if output_mode == OutputMode.EveryN:
            assert output_return_period and output_return_period > 0, (
                "EveryN anchor must have output_return_period set to valid positive integer"
            )
        self.set(output_mode=output_mode.value, output_return_period=output_return_period or 1)
        return self

    def defaultOutputMode(self) -> bool:
        """Whether the output mode is still ``Default`` (resolved when an executor is built)."""
        return bool(self.output_mode == OutputMode.Default)

    def randomSeed(self, random_seed: int) -> Options:
        """Seed the device's random generator (and ``torch.manual_seed``)."""
        assert isinstance(random_seed, int)
        torch.manual_seed(random_seed)
        self.createOrSet(random_seed=random_seed)
        return self

    def enableStableNorm(self, enabled: bool) -> Options:
        """Use the numerically stable variance in normalisations."""
        self._Popart.set("enableStableNorm", enabled)
        return self

    def enableSyntheticData(self, enabled: bool) -> Options:
        """Use random data on the device instead of the host's (benchmarks; the emulator uses the host's)."""
        self._Popart.set("syntheticDataMode", 2 if enabled else 0)
        return self

    def logCycleCount(self, log_cycle_count: bool) -> Options:
        """Count the IPU's cycles per call (``PoplarExecutor.cycleCount``, not emulated)."""
        self._Popart.set("instrumentWithHardwareCycleCounter", log_cycle_count)
        return self

    def enableProfiling(self, profile_dir: str | None = None) -> Options:
        """Write PopVision reports to ``profile_dir`` (the emulator writes its JSON summary there)."""
        engine = dict(self._popart.options.get("engineOptions", {}))
        engine.update(
            {"debug.allowOutOfMemory": "true", "autoReport.directory": profile_dir or ".", "autoReport.all": "true"}
        )
        self._popart.setEngineOptions(engine)
        return self

    def disableModuleNamescope(self) -> Options:
        """Do not name operators after their modules."""
        self._module_namescope_enabled = False
        return self

    def updatableNamedBuffers(self, buffers: list[str]) -> Options:
        """Buffers that ``PoplarExecutor.copyNamedBuffersToDevice`` may update."""
        self._Popart.set("updatableNamedBuffers", buffers)
        return self

    def toDict(self) -> dict[str, Any]:
        """All options merged into one dictionary, as poptorch hands them to its backend.

        Raises:
            AssertionError: When the output mode is still ``Default`` (as in poptorch: use ``executor.options``).
        """
        assert not self.defaultOutputMode(), "An output mode must be picked before serialisation"
        out = self._execution_strategy.backendOptions()
        out.update(self._popart.options)
        out = self.update(out)
        out = self._training.update(out)
        out = self._distributed.update(out)
        return self._tensor_locations.update(out)

    def clone(self) -> Options:
        """An unfrozen deep copy."""
        clone = copy.deepcopy(self)
        clone._unfreeze()
        return clone

    def __repr__(self) -> str:
        return f"Options({', '.join(f'{k}={v!r}' for k, v in self._values.items())}, Training={self._training!r})"
