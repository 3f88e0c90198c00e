"""``poptorch.Options``: the option dictionaries with poptorch's storage, type and freezing rules."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import torch

from .enums import MeanReductionStrategy, OutputMode, ReductionType
from .execution import PipelinedExecution, ShardedExecution

__all__ = ["Options", "OptionsDict", "TrainingOptions"]


class OptionsDict:
    """A dictionary of options with fixed names and types that can be frozen.

    Reading an unknown attribute raises ``AttributeError("Invalid attribute <name>.")``; setting a value whose type
    differs from the default's raises ``TypeError``; any change after :meth:`_freeze` raises
    ``AttributeError("Can't modify frozen Options")``.

    Example:
        >>> opts = OptionsDict(size=1)
        >>> opts.set(size=2).size
        2
    """

    def __init__(self, **defaults: Any) -> None:
        object.__setattr__(self, "_is_frozen", False)
        object.__setattr__(self, "_values", dict(defaults))

    def _check_not_frozen(self) -> None:
        if self._is_frozen:
            raise AttributeError("Can't modify frozen Options")

    def set(self, **kwargs: Any) -> OptionsDict:
        """Set existing options; the value must have the default's type."""
        self._check_not_frozen()
        for option, value in kwargs.items():
            if option not in self._values:
                raise AttributeError(
                    f"Invalid option {option}, valid options are {sorted(self._values)}. Use createOrSet() to add one."
                )
            expected = type(self._values[option])
            # bool is an int in Python but never an accepted count, and an int is not a bool.
            if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
                raise TypeError(f"Unexpected type {type(value)} for option {option}. Expected {expected}")
            self._values[option] = value
        return self

    def createOrSet(self, **kwargs: Any) -> OptionsDict:
        """Set options, adding those that do not exist yet."""
        self._check_not_frozen()
        for option, value in kwargs.items():
            if option in self._values:
                self.set(**{option: value})
            else:
                self._values[option] = value
        return self

    def exists(self, option: str) -> bool:
        """Whether ``option`` is defined."""
        return option in self._values

    def _freeze(self) -> None:
        self._set_frozen(True)

    def _unfreeze(self) -> None:
        self._set_frozen(False)

    def _set_frozen(self, frozen: bool) -> None:
        object.__setattr__(self, "_is_frozen", frozen)
        for value in vars(self).values():
            if isinstance(value, OptionsDict):
                value._set_frozen(frozen)

    def toDict(self) -> dict[str, Any]:
        """A copy of the option values."""
        return dict(self._values)

    def __getattr__(self, option: str) -> Any:
        values = self.__dict__.get("_values", {})
        if option in values:
            return values[option]
        raise AttributeError(f"Invalid attribute {option}.")

    def __setattr__(self, option: str, value: Any) -> None:
        if option.startswith("_"):
            self._check_not_frozen()
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


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"Unexpected type {type(value)} for option {name}. Expected {int}")
    if value < 1:
        raise ValueError(f"Option {name} must be a positive integer, got {value}.")
    return value


class TrainingOptions(OptionsDict):
    """``Options.Training``: gradient accumulation and its reduction.

    Example:
        >>> TrainingOptions().gradientAccumulation(4).gradient_accumulation
        4
    """

    def __init__(self) -> None:
        super().__init__(
            gradient_accumulation=1,
            accumulation_and_replication_reduction_type=int(ReductionType.Mean),
            meanAccumulationAndReplicationReductionStrategy=MeanReductionStrategy.Post,
        )

    def gradientAccumulation(self, gradient_accumulation: int) -> TrainingOptions:
        """Number of micro-batches whose gradients are accumulated before each weight update."""
        self.set(gradient_accumulation=_positive_int("gradient_accumulation", gradient_accumulation))
        return self

    def accumulationAndReplicationReductionType(self, reduction_type: ReductionType) -> TrainingOptions:
        """Reduce accumulated and replicated gradients by ``ReductionType.Mean`` (default) or ``Sum``."""
        if not isinstance(reduction_type, ReductionType):
            raise TypeError(f"reduction_type must be a poptorch.ReductionType, got {reduction_type!r}.")
        if reduction_type == ReductionType.NoReduction:
            raise ValueError(
                "accumulationAndReplicationReductionType(ReductionType.NoReduction) is not supported: use "
                "ReductionType.Mean or ReductionType.Sum."
            )
        self.set(accumulation_and_replication_reduction_type=int(reduction_type))
        return self

    def setMeanAccumulationAndReplicationReductionStrategy(
        self, mean_reduction_strategy: MeanReductionStrategy
    ) -> TrainingOptions:
        """When a mean reduction divides (``options.py:307-334``); float32 results do not depend on it."""
        self.set(meanAccumulationAndReplicationReductionStrategy=mean_reduction_strategy)
        return self

    def toDict(self) -> dict[str, Any]:
        """The training options as poptorch serialises them."""
        values = dict(self._values)
        values["meanAccumulationAndReplicationReductionStrategy"] = int(
            values["meanAccumulationAndReplicationReductionStrategy"]
        )
        return values


class _PopartOptions:
    """Backend (PopART) options set through ``Options._Popart.set(name, value)``."""

    def __init__(self) -> None:
        self.options: dict[str, Any] = {"instrumentWithHardwareCycleCounter": False, "rearrangeAnchorsOnHost": False}
        self._is_frozen = False

    def set(self, key: str, value: Any) -> _PopartOptions:
        if self._is_frozen:
            raise AttributeError("Can't modify frozen Options")
        self.options[key] = value
        return self


class Options(OptionsDict):
    """``poptorch.Options``: how a model is batched, replicated and compiled.

    The constructor applies ``POPTORCH_DEFAULT_OPTIONS`` (a JSON object of ``{"accessor.path": value}``) and
    ``POPTORCH_CACHE_DIR`` from the environment. Once a ``DataLoader`` or an executor has used the options they are
    frozen; :meth:`clone` gives an unfrozen copy.

    Example:
        >>> opts = Options().deviceIterations(4).replicationFactor(2)
        >>> opts.Training.gradientAccumulation(2)
        TrainingOptions(gradient_accumulation=2, accumulation_and_replication_reduction_type=1)
        >>> opts.device_iterations * opts.replication_factor * opts.Training.gradient_accumulation
        16
    """

    def __init__(self) -> None:
        super().__init__(
            replication_factor=1,
            input_group_size=1,
            broadcast_buffers=True,
            device_iterations=1,
            log_dir=".",
            auto_round_num_ipus=False,
            output_mode=int(OutputMode.Default),
            output_return_period=1,
        )
        object.__setattr__(self, "_training", TrainingOptions())
        object.__setattr__(self, "_popart", _PopartOptions())
        object.__setattr__(self, "_execution_strategy", PipelinedExecution())
        cache_dir = os.environ.get("POPTORCH_CACHE_DIR")
        if cache_dir:
            self.enableExecutableCaching(cache_dir)
        self.from_json(os.environ.get("POPTORCH_DEFAULT_OPTIONS", "{}"))

    def _set_frozen(self, frozen: bool) -> None:
        super()._set_frozen(frozen)
        self._popart._is_frozen = frozen

    @property
    def Training(self) -> TrainingOptions:
        """Training options (gradient accumulation and its reduction)."""
        return self._training

    @property
    def _Popart(self) -> _PopartOptions:
        return self._popart

    def from_json(self, string: str) -> Options:
        """Apply ``{"name.of.accessor": value}`` pairs, e.g. ``'{"deviceIterations": 4}'``.

        A string value ``"Enum.Member"`` names a poptorch enum member; a list value is passed as positional
        arguments.
        """
        from . import enums

        try:
            values = json.loads(string)
        except json.JSONDecodeError as err:
            raise ValueError(f"poptorch options JSON {string!r} is not valid JSON: {err}.") from err
        if not isinstance(values, dict):
            raise ValueError(f"poptorch options JSON must be an object of accessor -> value, got {string!r}.")
        for accessor, value in values.items():
            target: Any = self
            for part in accessor.split("."):
                target = getattr(target, part)
            if isinstance(value, str) and value.count(".") == 1:
                enum_name, member = value.split(".")
                enum_type = getattr(enums, enum_name, None)
                if enum_type is not None and hasattr(enum_type, member):
                    value = getattr(enum_type, member)
            if isinstance(value, list):
                target(*value)
            else:
                target(value)
        return self

    def deviceIterations(self, device_iterations: int) -> Options:
        """Number of training (or inference) iterations the device runs per host call."""
        self.set(device_iterations=_positive_int("device_iterations", device_iterations))
        return self

    def replicationFactor(self, replication_factor: int) -> Options:
        """Number of data-parallel replicas of the model."""
        self.set(replication_factor=_positive_int("replication_factor", replication_factor))
        return self

    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> Options:
        """Reserve the next power of two IPUs instead of failing when the model uses another count."""
        self.set(auto_round_num_ipus=auto_round_num_ipus)
        return self

    def outputMode(self, output_mode: OutputMode, output_return_period: int | None = None) -> Options:
        """Which results a host call returns: ``All``, ``Final``, ``Sum``, ``EveryN`` (with a period) or ``Default``."""
        if not isinstance(output_mode, OutputMode):
            raise TypeError(f"output_mode must be a poptorch.OutputMode, got {output_mode!r}.")
        if output_mode == OutputMode.EveryN and not (
            isinstance(output_return_period, int)
            and not isinstance(output_return_period, bool)
            and output_return_period > 0
        ):
            raise ValueError("EveryN anchor must have output_return_period set to valid positive integer")
        period = output_return_period if output_mode == OutputMode.EveryN else 1
        self.set(output_mode=int(output_mode), output_return_period=period or 1)
        return self

    def defaultOutputMode(self) -> bool:
        """Whether the output mode is still ``Default`` (resolved when an executor is built)."""
        return bool(self.output_mode == OutputMode.Default)

    def randomSeed(self, random_seed: int) -> Options:
        """Seed the device's random generator (and ``torch.manual_seed``)."""
        if isinstance(random_seed, bool) or not isinstance(random_seed, int):
            raise TypeError(f"randomSeed(random_seed) takes an int, got {random_seed!r}.")
        torch.manual_seed(random_seed)
        self.createOrSet(random_seed=random_seed)
        return self

    def modelName(self, name: str) -> Options:
        """Name of the model; the sub-directory of the report directory that its profile goes to."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"modelName(name) takes a non-empty str, got {name!r}.")
        self.createOrSet(model_name=name)
        return self

    def enableExecutableCaching(self, path: str | None) -> Options:
        """Cache compiled executables in ``path`` (``None`` turns caching off)."""
        if path is None:
            self._popart.set("enableEngineCaching", False)
        else:
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError(f"enableExecutableCaching(path) takes a str or None, got {path!r}.")
            self._popart.set("cachePath", os.fspath(path))
            self._popart.set("enableEngineCaching", True)
        return self

    def logDir(self, log_dir: str) -> Options:
        """Where poptorch writes its logs."""
        self.set(log_dir=str(log_dir))
        return self

    def setExecutionStrategy(self, strategy: PipelinedExecution | ShardedExecution) -> Options:
        """Choose how the stages of a multi-IPU model run (``PipelinedExecution`` or ``ShardedExecution``)."""
        if not isinstance(strategy, PipelinedExecution):
            raise TypeError(f"setExecutionStrategy takes a PipelinedExecution or ShardedExecution, got {strategy!r}.")
        self._check_not_frozen()
        object.__setattr__(self, "_execution_strategy", strategy)
        return self

    def toDict(self) -> dict[str, Any]:
        """All options merged into one dictionary, as poptorch hands them to its backend.

        Raises:
            AssertionError: When the output mode is still ``Default`` (as in poptorch: use ``executor._options``).
        """
        assert not self.defaultOutputMode(), "An output mode must be picked before serialisation"
        out: dict[str, Any] = {"execution_mode": 0 if isinstance(self._execution_strategy, ShardedExecution) else 1}
        out.update(self._popart.options)
        out.update(self._values)
        out.update(self._training.toDict())
        return out

    def clone(self) -> Options:
        """An unfrozen deep copy."""
        clone = copy.deepcopy(self)
        clone._unfreeze()
        return clone

    def __repr__(self) -> str:
        return f"Options({', '.join(f'{k}={v!r}' for k, v in self._values.items())}, Training={self._training!r})"
