"""``PoplarExecutor``, ``trainingModel`` and ``inferenceModel``: the emulated device runtime.

As poptorch does, the executor wraps a shallow copy of the model (``copy.copy``, poptorch 3.4
``python/__init__.py:710,743``), traces that copy's Python once when it compiles (with the model's parameter and
buffer slots pointing at the executor's own "device" copy of the weights) and runs the traced program for every
micro-batch of every later call (see :mod:`.program`). One host call
consumes ``device_iterations x gradient_accumulation x replicas`` micro-batches laid out as
``[device_iterations][gradient_accumulation][replicas]`` along dimension 0 and, in training, performs one weight
update per device iteration with the gradients of its ``gradient_accumulation x replicas`` micro-batches reduced by
``Mean`` (default) or ``Sum``. Replicas run one after another on the same weights, which gives the same result as
data-parallel replicas with an all-reduce.

Weights move between host and device only as poptorch moves them (``python/_poplar_executor.py``):

- compiling and every ``attachToDevice`` upload the host weights (``_on_device_attach``, lines 414-431);
- ``copyWeightsToDevice()`` uploads them; ``load_state_dict`` on the executor loads the host model and uploads when
  attached (lines 458-474);
- a training call makes the device weights the current ones; the host copy follows (poptorch copies lazily when the
  host model is read, ``copyWeightsToHostIfNeeded``, lines 543-553; the emulator copies after every call, which a
  reader of the host weights cannot tell apart) and each copy to the host counts one host-weights version
  (line 573);
- an inference executor of a model that a training executor wraps uploads the host weights before a call when that
  training executor's host-weights version differs from the one it last uploaded (lines 1246-1262).

Nothing else reaches the device: an edit of the host weights (a callback that rescales them, EMA, pruning) is not
seen by an attached executor until one of the above copies it there.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import copyreg
import datetime
import inspect
import logging
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from lightning_accel.core.pycompat import strict_zip

from . import automatic_loss_scaling as als
from . import device, optimizer_state, report
from .device_optimizers import VELOCITY, DeviceRMSprop, DeviceSGD
from .enums import CommGroupType, ConnectionType, MeanReductionStrategy, OutputMode, ReductionType
from .errors import Error
from .execution import ShardedExecution
from .ipu_tensors import move_model_to_ipu
from .left_out import left_out
from .lowering import message as poptorch_message
from .optim import LAMB, SGD, TensorFlowRMSprop
from .optim import Optimizer as PoptorchOptimizer
from .optimizer_values import OptimizerValues, Pair, check_replacement, kind_of, optimizer_values
from .options import Options
from .program import Program, trace
from .structures import flatten, get_custom_parser, unflatten
from .tracing import DeviceContext, final_loss, running_on

__all__ = ["PoplarExecutor", "inferenceModel", "registerPostCompileHook", "registerPreCompileHook", "trainingModel"]

log = logging.getLogger("poptorch")

NO_EXECUTABLE_ERR = (
    "Model has not been compiled or has been destroyed. Call the model (or compile()) before this operation."
)
_MISMATCH_END = (
    "\nThis error occurred because the inputs passed at runtime don't match the inputs used to compile the model.\n"
    "To recompile the model for the new inputs create a new inferenceModel / trainingModel wrapper or call destroy() "
    "on the curent one and try again."
)
# Functions called before and after every compilation (poptorch 3.4 _poplar_executor.py:800-801, 886-887).
_PRE_COMPILE_HOOKS: collections.OrderedDict[int, Any] = collections.OrderedDict()
_POST_COMPILE_HOOKS: collections.OrderedDict[int, Any] = collections.OrderedDict()


def _register(hooks: collections.OrderedDict[int, Any], hook: Any) -> Any:
    handle = torch.utils.hooks.RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def registerPreCompileHook(hook: Any) -> Any:
    """Call ``hook()`` before every compilation; returns a handle whose ``remove()`` unregisters it."""
    return _register(_PRE_COMPILE_HOOKS, hook)


def registerPostCompileHook(hook: Any) -> Any:
    """Call ``hook()`` after every compilation; returns a handle whose ``remove()`` unregisters it."""
    return _register(_POST_COMPILE_HOOKS, hook)


# Modules whose buffers the model may replace while it runs (poptorch 3.4 python/_impl.py:28-35).
_BUFFERS_CAN_CHANGE = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
# Models wrapped by a trainingModel that was not destroyed (poptorch allows one at a time), and that wrapper.
_training_wrapped: weakref.WeakKeyDictionary[torch.nn.Module, weakref.ref[PoplarExecutor]] = weakref.WeakKeyDictionary()


def _pickle_unwrapped(param: torch.nn.Parameter) -> Any:
    """Pickle (``torch.save``) a wrapped parameter as the ``torch.nn.Parameter`` it wraps (``_impl.py:318-337``)."""
    wrapper = type(param)
    param.__class__ = torch.nn.Parameter
    try:
        return param.__reduce_ex__(2)
    finally:
        param.__class__ = wrapper


def _wrap_parameters(model: torch.nn.Module, parent: weakref.ref[PoplarExecutor]) -> type:
    """Make every read of an attribute of ``model``'s parameters copy the weights to the host when they are dirty.

    poptorch swaps the class of each parameter for ``PoptorchParameter``, whose ``__getattribute__`` calls
    ``copyWeightsToHostIfNeeded()`` (``_poplar_executor.py:319-333``, ``_install_state_hooks``, ``:372-381``).
    The emulator swaps parameters (not buffers) the same way.
    """

    class PoptorchParameter(torch.nn.Parameter):
        def __getattribute__(self, name: str) -> Any:
            executor = parent()
            if executor is not None:
                executor.copyWeightsToHostIfNeeded()
            return object.__getattribute__(self, name)

    copyreg.pickle(PoptorchParameter, _pickle_unwrapped)
    for param in model.parameters():
        if type(param) is torch.nn.Parameter:
            param.__class__ = PoptorchParameter
    return PoptorchParameter


class _Compiled:
    """What compilation produced: the input signature, the placement of the model on IPUs and the program."""

    def __init__(
        self,
        signature: list[tuple[str, Any]],
        context: DeviceContext,
        num_ipus: int,
        stages: int,
        program: Program,
        state_names: list[str],
        compile_time: datetime.timedelta,
    ) -> None:
        self.compile_time = compile_time
        self.signature = signature
        self.context = context
        self.num_ipus = num_ipus
        self.stages = stages
        self.program = program
        self.state_names = state_names


def _names_of_arguments(model: torch.nn.Module, count: int) -> list[str]:
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    names: list[str] = []
    for param in parameters:
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            names.append(param.name)
        elif param.kind == param.VAR_POSITIONAL:
            names.extend(f"{param.name}[{i}]" for i in range(count - len(names)))
    names.extend(f"argument {i}" for i in range(len(names), count))
    return names[:count]


def _describe(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every leaf of the inputs with a readable name (``x``, ``batch[0]``, ``inputs[label]``)."""
    described: list[tuple[str, Any]] = []

    def walk(name: str, value: Any) -> None:
        if get_custom_parser(value) is not None:
            for i, item in enumerate(flatten(value)[0]):
                walk(f"{name}[{i}]", item)
        elif isinstance(value, (tuple, list)):
            for i, item in enumerate(value):
                walk(f"{name}[{i}]", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{name}[{key}]", item)
        else:
            described.append((name, value))

    for name, arg in zip(_names_of_arguments(model, len(args)), args):
        walk(name, arg)
    for key, value in kwargs.items():
        walk(key, value)
    return described


class PoplarExecutor:
    """A model compiled for (emulated) IPUs; call it like the model.

    Built by :func:`trainingModel` or :func:`inferenceModel`. The first call compiles the model for the shapes it
    is given and attaches to the IPUs; later calls must pass inputs of the same types, shapes and values.

    Example:
        >>> model = torch.nn.Linear(4, 2)
        >>> executor = inferenceModel(model, Options().deviceIterations(2))
        >>> executor(torch.ones(6, 4)).shape
        torch.Size([6, 2])
        >>> executor.destroy()
    """

    def __init__(
        self,
        model: torch.nn.Module,
        options: Options | None,
        training: bool,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        if options:
            if not isinstance(options, Options):
                # _poplar_executor.py:147-151.
                raise Error(f"Invalid type: 'options' is of type {type(options)} (Expected poptorch.Options)")
        else:
            options = Options()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
        options._freeze()
        resolved = options.clone()
        if training:
            if resolved.defaultOutputMode():
                resolved.outputMode(OutputMode.Final)
            if optimizer is None:
                # poptorch's default (_poplar_executor.py:171-172).
                optimizer = SGD(model.parameters(), lr=0.01)
        else:
            if resolved.defaultOutputMode():
                resolved.outputMode(OutputMode.All)
            if resolved.Training.gradient_accumulation != 1:
                message = (
                    "You must set poptorch.Options().Training.gradientAccumulation to 1 or leave it as its default "
                    "value (1) when running a poptorch.inferenceModel()."
                )
                if not isinstance(resolved._execution_strategy, ShardedExecution):
                    message += (
                        " Use poptorch.Options().deviceIterations to process a sufficient number of batches each run "
                        "for pipelined execution instead."
                    )
                raise Error(message)
        resolved._freeze()
        self._user_model = model
        # poptorch runs a shallow copy: attributes the model's Python assigns while it is traced land on the copy.
        self._model = copy.copy(model)
        self._host_weights_version = 0
        self._dirty_host_weights = False
        self._options = resolved
        self._training = training
        self._executable: _Compiled | None = None
        self._optimizer = optimizer
        # What PopART was (or will be) given, and what the compiled program holds (poptorch converts the optimizer
        # when the executor is built, _poplar_executor.py:241-242).
        self._optimizer_values: OptimizerValues | None = None
        self._compiled_optimizer_values: OptimizerValues | None = None
        # Automatic loss scaling's multiplier of the optimizer's loss_scaling (PopART's lossScaleUpdateFactor).
        self._loss_scale_update_factor = 1.0
        if optimizer is not None:
            self._optimizer_values = self._convert_optimizer(optimizer)
        self._is_attached = False
        self._device_state: dict[str, torch.Tensor] = {}
        self._replica_buffers: list[dict[str, torch.Tensor]] = []
        self._rng_state: list[int] | None = None
        self._device_generator_state: torch.Tensor | None = None
        self._device_optimizer: torch.optim.Optimizer | None = None
        # PopART's host copies of its optimizer inputs, which poptorch reads into ipu_param (optimizer_state.py).
        self._optimizer_inputs: dict[str, torch.Tensor] = {}
        if training:
            # poptorch swaps the class of every buffer of a training model for its own wrapper and refuses any other
            # class than torch.Tensor (_poplar_executor.py:375-383).
            for buffer in model.buffers():
                if type(buffer) is not torch.Tensor:
                    raise Error(poptorch_message("buffer_subclass", type=type(buffer)))
            # Like poptorch, which swaps the model's class (python/_poplar_executor.py:326-383), a model stays wrapped
            # until the destroy() of a compiled training wrapper unwraps it, even after that wrapper is collected.
            _training_wrapped[model] = weakref.ref(self)
            self._parameter_type = _wrap_parameters(model, weakref.ref(self))
        weakref.finalize(self, device.release, id(self))

    # -- introspection -----------------------------------------------------------------------------------------

    @property
    def model(self) -> torch.nn.Module:
        """The wrapped host model."""
        return self._user_model

    @property
    def options(self) -> Options:
        """The frozen options the executor runs with (output mode resolved)."""
        return self._options

    def compilationTime(self) -> Any:
        """How long compiling took (a ``datetime.timedelta``; the emulator's trace, not a Poplar compile)."""
        if not self.isCompiled():
            raise Error(NO_EXECUTABLE_ERR)
        assert self._executable is not None
        return self._executable.compile_time

    def getTensorNames(self) -> list[str]:
        """Names of the compiled model's weights and buffers."""
        if not self.isCompiled():
            raise Error(NO_EXECUTABLE_ERR)
        assert self._executable is not None
        return list(self._executable.state_names)

    def copyNamedBuffersToDevice(self) -> None:
        """Copy the buffers named by ``Options.updatableNamedBuffers`` to the device."""
        if not self.isCompiled():
            raise Error(NO_EXECUTABLE_ERR)
        names = self._options._Popart.options.get("updatableNamedBuffers")
        if names is None:
            raise Error("No named buffers marked as updatable via updatableNamedBuffers option")
        buffers = dict(self._model.named_buffers())
        with torch.no_grad():
            for name in names:
                self._device_state[name].copy_(buffers[name])

    def _seed_device_generator(self) -> None:
        """At every attach, the device generator restarts from the cached state: ``[randomSeed]`` until one is set.

        poptorch caches ``[options.random_seed]`` (``_poplar_executor.py:224-226``) and copies the cached state to the
        device in ``_on_device_attach`` (``:431-432``). The emulated device then draws from a generator of its own,
        which leaves the host's alone; without a seed it draws from torch's.
        """
        if self._rng_state is not None:
            seed = self._rng_state[0]
        elif self._options.exists("random_seed"):
            seed = self._options.random_seed
        else:
            return
        self._device_generator_state = torch.Generator().manual_seed(int(seed)).get_state()

    @contextlib.contextmanager
    def _device_generator(self) -> Iterator[None]:
        """Random operations of the program draw from the device's generator, when it has one."""
        if self._device_generator_state is None:
            yield
            return
        host = torch.random.get_rng_state()
        torch.random.set_rng_state(self._device_generator_state)
        try:
            yield
        finally:
            self._device_generator_state = torch.random.get_rng_state()
            torch.random.set_rng_state(host)

    @property
    def rng_state(self) -> list[int]:
        """The seed and state of the device's random generator (the emulator's is torch's: ``[seed]``)."""
        if not self.isCompiled():
            raise Error(NO_EXECUTABLE_ERR)
        seed = self._options.random_seed if self._options.exists("random_seed") else torch.initial_seed()
        return list(self._rng_state) if self._rng_state is not None else [int(seed)]

    @rng_state.setter
    def rng_state(self, state: list[int]) -> None:
        if not self.isCompiled():
            raise Error(NO_EXECUTABLE_ERR)
        self._rng_state = list(state)
        if self.isAttachedToDevice():
            self._seed_device_generator()

    getAnchoredTensor = left_out("poptorch.PoplarExecutor.getAnchoredTensor")
    save = left_out("poptorch.PoplarExecutor.save")
    compileAndExport = left_out("poptorch.PoplarExecutor.compileAndExport")
    loadExecutable = left_out("poptorch.PoplarExecutor.loadExecutable")
    cycleCount = left_out("poptorch.PoplarExecutor.cycleCount")
    getPerfCounters = left_out("poptorch.PoplarExecutor.getPerfCounters")
    getLatency = left_out("poptorch.PoplarExecutor.getLatency")
    getHostIpuLatency = left_out("poptorch.PoplarExecutor.getHostIpuLatency")
    getComputeLatency = left_out("poptorch.PoplarExecutor.getComputeLatency")
    getIpuHostLatency = left_out("poptorch.PoplarExecutor.getIpuHostLatency")

    def isCompiled(self) -> bool:
        """Whether the model has been compiled (and not destroyed)."""
        return self._executable is not None

    def isAttachedToDevice(self) -> bool:
        """Whether the executor holds its IPUs (``False`` before compilation)."""
        return self.isCompiled() and self._is_attached

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the executor does not define: they belong to the wrapped model.
        if name.startswith("__") or name in ("_user_model", "_model"):
            raise AttributeError(name)
        return getattr(self._user_model, name)

    # -- weights -----------------------------------------------------------------------------------------------

    def _host_tensors(self) -> Iterator[tuple[str, torch.Tensor, bool]]:
        for name, param in self._model.named_parameters():
            yield name, param, True
        for name, buffer in self._model.named_buffers():
            yield name, buffer, False

    def _upload(self) -> None:
        """Copy the host weights, buffers and optimizer state to the device copy."""
        state: dict[str, torch.Tensor] = {}
        for name, tensor, is_param in self._host_tensors():
            copy_ = tensor.detach().clone()
            state[name] = torch.nn.Parameter(copy_, requires_grad=tensor.requires_grad) if is_param else copy_
        self._device_state = state
        # Each replica holds its own buffers (BatchNorm statistics): a model that writes its buffers compiles with
        # replicas only under broadcastBuffers(False) (see compile), which leaves each replica its own
        # (options.py:1508-1516). Replica 0's are the executor's, which the host reads back (PopART retrieves one
        # replica of a variable, VariableRetrievalMode.OnePerGroup).
        buffers = [name for name, _, is_param in self._host_tensors() if not is_param]
        self._replica_buffers = [
            {name: state[name].clone() for name in buffers} for _ in range(self._options.replication_factor - 1)
        ]
        if self._training and self._optimizer is not None:
            self._build_device_optimizer(self._optimizer)

    @contextlib.contextmanager
    def _device_weights(self, state: dict[str, torch.Tensor] | None = None) -> Iterator[None]:
        """Run the host model's code on the device copy: its parameter and buffer slots point there meanwhile.

        Tied weights stay tied: every slot holding the same host tensor gets the same device tensor. A parameter or
        buffer the model's code replaces (``self.count = self.count + 1``) raises poptorch's error once the code has
        run (``errorOnBufferOrParameterAddressChanges``, ``python/_impl.py:432-451``); BatchNorm's buffers may change
        (``BUFFERS_CAN_CHANGE``, ``:28-35``).
        """
        state = self._device_state if state is None else state
        by_host = {id(tensor): state[name] for name, tensor, _ in self._host_tensors() if name in state}
        swapped: list[tuple[dict[str, Any], str, Any, str, str]] = []
        try:
            for module_name, module in self._model.named_modules():
                exempt = isinstance(module, _BUFFERS_CAN_CHANGE)
                for kind, slots in (("Parameter", module._parameters), ("Buffer", module._buffers)):
                    for key, host in slots.items():
                        if host is not None and id(host) in by_host:
                            swapped.append(
                                (slots, key, host, kind if not (exempt and kind == "Buffer") else "", module_name)
                            )
                            slots[key] = by_host[id(host)]
            yield
            for slots, key, host, kind, module_name in swapped:
                if kind and slots.get(key) is not by_host[id(host)]:
                    name = f"{module_name}.{key}" if module_name else key
                    raise Error(
                        f"{kind} {name} is reassigned within the model when calling the forward method. This is not "
                        f"supported. Consider using self.{name}.copy_(src) to copy data from a source tensor, where "
                        "src is the name of the source tensor."
                    )
        finally:
            for slots, key, host, _, _ in reversed(swapped):
                slots[key] = host

    def _download(self) -> None:
        """Copy the device weights and buffers (and poptorch optimizer state) back to the host model."""
        with torch.no_grad():
            for name, tensor, _ in self._host_tensors():
                source = self._device_state.get(name)
                if source is not None:
                    tensor.copy_(source)
        if isinstance(self._optimizer, PoptorchOptimizer) and self._device_optimizer is not None:
            # poptorch reads the device's optimizer state into ipu_state (readOptimizerState, poptorch.cpp:959-990).
            self._optimizer._state_dict = self._read_ipu_state()
            self._optimizer.ipu_state_is_dirty = False
            self._optimizer.host_state_is_dirty = False

    def copyWeightsToHostIfNeeded(self) -> bool:
        """Copy the device weights to the host if a training call changed them since the last copy (``True`` then).

        As poptorch (``_poplar_executor.py:543-553``): a training call marks the host weights dirty (``:1286-1287``)
        and reading any attribute of a parameter of the wrapped model (``.grad``, ``.shape``, ``.data``) calls this.
        The emulator has the values on the host already (it copies after every call); what it keeps as poptorch does
        is when a copy happens, which ``_host_weights_version`` counts.
        """
        if self._dirty_host_weights:
            log.debug("Implicit copyWeightsToHost()")
            self.copyWeightsToHost()
            return True
        return False

    def copyWeightsToHost(self) -> None:
        """Copy the device weights to the host model (one more host-weights version, ``:555-573``)."""
        if not self.isCompiled():
            raise Error(NO_EXECUTABLE_ERR)
        self._dirty_host_weights = False
        self._download()
        self._host_weights_version += 1

    def copyWeightsToDevice(self) -> None:
        """Copy the host weights to the device."""
        if not self.isCompiled():
            raise Error(NO_EXECUTABLE_ERR)
        self._upload()

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> Any:
        """Load weights into the host model and, when attached, copy them to the device (poptorch's rule)."""
        out = self._user_model.load_state_dict(state_dict, strict=strict)
        if self.isAttachedToDevice():
            self.copyWeightsToDevice()
        return out

    # -- optimizer ---------------------------------------------------------------------------------------------

    def _convert_optimizer(self, optimizer: Any) -> OptimizerValues:
        """Poptorch's conversion of ``optimizer`` for PopART (its asserts and errors included)."""
        automatic = bool(self._options._Popart.options.get("automaticLossScalingSettings.enabled", False))
        values = optimizer_values(optimizer, automatic)
        if values["attributes"].get("accum_type") == torch.float16 and not values["attributes"].get(
            "use_combined_accum", False
        ):
            # A float16 accumulator needs the Running mean reduction (_optimizer_attributes.py:133-152).
            self._use_running_mean_reduction()
        return values

    def _use_running_mean_reduction(self) -> None:
        training = self._options.Training
        running = MeanReductionStrategy.Running
        if not self.isCompiled():
            self._options._unfreeze()
            training.setMeanAccumulationAndReplicationReductionStrategy(running)
            self._options._freeze()
        elif training.meanAccumulationAndReplicationReductionStrategy != running:
            raise ValueError(
                "Invalid optimizer: the new optimizer would require changing options.Training."
                "meanAccumulationAndReplicationReductionStrategy to poptorch.MeanReductionStrategy.Running but the "
                "executable is already compiled."
            )

    def _device_params(self, optimizer: torch.optim.Optimizer) -> list[list[torch.Tensor]]:
        names = {id(param): name for name, param in self._model.named_parameters()}
        groups = []
        for group in optimizer.param_groups:
            params = []
            for param in group["params"]:
                if id(param) not in names:
                    raise ValueError(
                        f"The optimizer holds a parameter of shape {tuple(param.shape)} that is not a parameter of "
                        "the wrapped model; build the optimizer from model.parameters()."
                    )
                params.append(self._device_state[names[id(param)]])
            groups.append(params)
        return groups

    def _ungrouped_params(self, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        """Trainable weights the optimizer does not hold: PopART updates them with the optimizer's defaults.

        poptorch tags only the grouped weights (``_poplar_executor.py:830-836``) and builds the PopART optimizer from
        the defaults, inserting group values for tagged weights only (``popart_compiler/source/CompilerImpl.cpp:
        791-866``); PopART's optimizer applies to every trainable weight.
        """
        grouped = {id(p) for group in optimizer.param_groups for p in group["params"]}
        return [
            self._device_state[name]
            for name, param in self._model.named_parameters()
            if param.requires_grad and id(param) not in grouped
        ]

    def _write_optimizer_state_if_needed(self) -> None:
        """Write a loaded ``ipu_state`` and ``ipu_param`` (a checkpoint's) to the device (poptorch's line 1268)."""
        host = self._optimizer
        if isinstance(host, PoptorchOptimizer) and host.ipu_state_is_dirty and self._device_optimizer is not None:
            if host.has_state():
                self._write_ipu_state(host._state_dict["ipu_state"], host._state_dict["ipu_param"])
            host.ipu_state_is_dirty = False

    def _write_ipu_state(self, ipu_state: Any, ipu_param: Any) -> None:
        """Write as poptorch's ``writeOptimizerState`` does (``python/poptorch.cpp:992-1035``).

        The state goes to the device, the inputs to PopART's host copies; a name the model lacks is ignored, one the
        dictionary lacks keeps its value.

        Raises:
            Error: For a dictionary that is not one, or an entry that cannot stand for its tensor.
        """
        assert self._device_optimizer is not None
        for key, value in (("ipu_state", ipu_state), ("ipu_param", ipu_param)):
            if not isinstance(value, Mapping):
                raise Error(
                    f"The optimizer state's {key} must be a dict of tensors by name, got {type(value).__name__}."
                )
        state = dict(ipu_state)
        factor = state.pop(als.UPDATE_FACTOR, None)
        if self._automatic_loss_scaling:
            if factor is None:
                log.warning("writeOptimizerState: ignoring missing state %s", als.UPDATE_FACTOR)
            else:
                self._loss_scale_update_factor = float(factor)
        elif factor is not None:
            state[als.UPDATE_FACTOR] = factor  # PopART has no such tensor: reported as unused
        weights = self._popart_weights()
        unused = optimizer_state.write_state(self._layout(), weights, self._device_optimizer.state, state)
        if unused:
            log.warning("Optimizer state tensors not used by the model: %s", unused)
        self._optimizer_inputs = optimizer_state.write_inputs(self._optimizer_inputs, ipu_param)

    @staticmethod
    def _device_group(source: dict[str, Any]) -> dict[str, Any]:
        # poptorch never reads maximize (_optimizer_attributes.py:221-265): the device always descends.
        group = {key: value for key, value in source.items() if key not in ("params", "maximize")}
        if "betas" in group:
            group["betas"] = tuple(group["betas"])
        return group

    def _build_device_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        device_groups = self._device_params(optimizer)
        groups = [
            {**self._device_group(group), "params": params}
            for group, params in zip(optimizer.param_groups, device_groups)
        ]
        ungrouped = self._ungrouped_params(optimizer)
        if ungrouped:
            groups.append({**self._device_group(optimizer.defaults), "params": ungrouped})
        layout = self._layout()
        for group, (hyper, _) in zip(groups, self._group_hyper()):
            if optimizer_state.keeps_velocity(layout, hyper):
                group[VELOCITY] = True
        kind = kind_of(optimizer)
        if kind == "LAMB":
            device_optimizer: torch.optim.Optimizer = LAMB(
                groups, bias_correction=getattr(optimizer, "bias_correction", True)
            )
        else:
            torch_kind = {
                "SGD": DeviceSGD,
                "Adam": torch.optim.Adam,
                "AdamW": torch.optim.AdamW,
                "RMSprop": DeviceRMSprop,
            }[str(kind)]
            if kind == "RMSprop" and getattr(optimizer, "use_tf_variant", False):
                torch_kind = TensorFlowRMSprop
            device_optimizer = torch_kind(groups)
        self._device_optimizer = device_optimizer
        if isinstance(optimizer, PoptorchOptimizer):
            # PopART refills its optimizer inputs from the optimizer at every attach (popx/devicex.cpp:1585-1590).
            self._optimizer_inputs = optimizer_state.optimizer_inputs(layout, self._popart_weights())
            if optimizer.has_state():
                optimizer.ipu_state_is_dirty = True
                self._write_optimizer_state_if_needed()
            elif self._options.connection_type != ConnectionType.Never:
                # Attached without a state to write: state_dict() reads the device's (_on_device_attach,
                # _poplar_executor.py:421-430), PopART's initial values until the first step. An offline
                # compilation attaches to nothing, so the state stays None (tests/optimizers_test.py:1316-1330).
                optimizer._state_dict = self._read_ipu_state()
                optimizer.ipu_state_is_dirty = False
                optimizer.host_state_is_dirty = False
        else:
            self._copy_optimizer_state(optimizer, device_optimizer)

    @property
    def _automatic_loss_scaling(self) -> bool:
        return bool(self._options._Popart.options.get("automaticLossScalingSettings.enabled", False))

    def _read_ipu_state(self) -> dict[str, Any]:
        """``ipu_state`` and ``ipu_param`` as poptorch reads them (``readOptimizerState``, ``poptorch.cpp:959-990``).

        With automatic loss scaling, ``ipu_state`` also holds its factor.
        """
        assert self._device_optimizer is not None
        state = optimizer_state.read_state(self._layout(), self._popart_weights(), self._device_optimizer.state)
        if self._automatic_loss_scaling:
            state[als.UPDATE_FACTOR] = torch.tensor(self._loss_scale_update_factor)
        inputs = {name: value.clone() for name, value in self._optimizer_inputs.items()}
        return {"ipu_state": state, "ipu_param": inputs}

    def _layout(self) -> optimizer_state.Layout:
        """What decides PopART's optimizer: the optimizer poptorch converted last, and the session options."""
        values = self._optimizer_values
        assert values is not None and self._optimizer is not None
        opts = self._options
        training = opts.Training
        session = optimizer_state.Session(
            replicas=opts.replication_factor,
            accumulation=training.gradient_accumulation,
            mean=training.accumulation_and_replication_reduction_type == ReductionType.Mean,
            post=training.meanAccumulationAndReplicationReductionStrategy == MeanReductionStrategy.Post,
        )
        # poptorch asserts that every group has the same centered (_optimizer_attributes.py:333-338).
        centered = bool(self._optimizer.param_groups[0].get("centered", False))
        return optimizer_state.Layout(values["kind"], values["attributes"], centered, session)

    def _group_hyper(self) -> list[tuple[dict[str, Pair], bool]]:
        """Per device parameter group: its ``(value, is_const)`` pairs with the loss scaling, and whether it is grouped.

        PopART holds values specific to the weights of the optimizer's groups, and its defaults for the weights no
        group holds (the device optimizer's last group).
        """
        values = self._optimizer_values
        assert values is not None
        loss_scaling = {"loss_scaling": values["defaults"]["loss_scaling"]}
        grouped = [({**pairs, **loss_scaling}, True) for pairs in values["groups"]]
        return [*grouped, (dict(values["defaults"]), False)]

    def _popart_weights(self) -> list[optimizer_state.Weight]:
        """The weights PopART's optimizer updates: the trainable ones of the device optimizer, by name.

        poptorch detaches a weight that does not require grad (``poptorch/source/AddDetachOperations.cpp:15-37``):
        PopART then has no gradient for it, so no update, no state and no inputs.
        """
        assert self._device_optimizer is not None
        names = {id(tensor): name for name, tensor in self._device_state.items()}
        weights = []
        for group, (hyper, specific) in zip(self._device_optimizer.param_groups, self._group_hyper()):
            for param in group["params"]:
                if param.requires_grad:
                    weights.append(optimizer_state.Weight(names[id(param)], param, hyper, specific))
        return weights

    @staticmethod
    def _copy_optimizer_state(host: torch.optim.Optimizer, target: torch.optim.Optimizer) -> None:
        host_params = [p for group in host.param_groups for p in group["params"]]
        device_params = [p for group in target.param_groups for p in group["params"]]
        for src, dst in zip(host_params, device_params):
            state = host.state.get(src)
            if state:
                target.state[dst] = {
                    k: v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for k, v in state.items()
                }

    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Use ``optimizer``'s hyper-parameters from the next weight update on, as PopART allows.

        After compilation only the variable hyper-parameters may change (see :mod:`.optimizer_values`); a changed
        constant raises PopART's "Values are constant but do not match." and leaves the device optimizer as it was.
        The device keeps its optimizer state.
        """
        if not self._training:
            raise Error("setOptimizer() can only be called on a poptorch.trainingModel.")
        values = self._convert_optimizer(optimizer)
        if self.isCompiled() and self._device_optimizer is not None:
            assert self._compiled_optimizer_values is not None
            check_replacement(self._compiled_optimizer_values, values)
        previous, previous_values = self._optimizer, self._optimizer_values
        self._optimizer = optimizer
        self._optimizer_values = values
        if not self.isCompiled() or self._device_optimizer is None:
            return
        if values != previous_values and isinstance(optimizer, PoptorchOptimizer):
            # poptorch updates PopART's optimizer when its conversion changed (_poplar_executor.py:660-668), which
            # refills the optimizer inputs (session.cpp:1007-1023).
            self._optimizer_inputs = optimizer_state.optimizer_inputs(self._layout(), self._popart_weights())
        if optimizer is not previous and isinstance(optimizer, PoptorchOptimizer) and optimizer.has_state():
            # A new poptorch optimizer's own state is written to the device (_poplar_executor.py:646-649).
            optimizer.ipu_state_is_dirty = True
            self._write_optimizer_state_if_needed()
        for group, device_group in zip(optimizer.param_groups, self._device_optimizer.param_groups):
            device_group.update(self._device_group(group))
        if len(self._device_optimizer.param_groups) > len(optimizer.param_groups):
            self._device_optimizer.param_groups[-1].update(self._device_group(optimizer.defaults))
        if isinstance(optimizer, PoptorchOptimizer) and optimizer.has_state() and not optimizer.ipu_state_is_dirty:
            # The host copy follows the device, as the emulator's copies do after every run.
            optimizer._state_dict = self._read_ipu_state()

    # -- attach / detach -------------------------------------------------------------------------------------

    def attachToDevice(self) -> None:
        """Attach to the IPUs again after :meth:`detachFromDevice`; pushes weights and optimizer state."""
        if not self.isCompiled():
            raise Error(NO_EXECUTABLE_ERR)
        assert self._options.connection_type != ConnectionType.Never, (
            "Trying to attach to an offline device (ConnectionType.Never)"
        )
        if self._is_attached:
            raise Error("Device is already attached")
        assert self._executable is not None
        device.acquire(id(self), self._executable.num_ipus)
        self._is_attached = True
        self._upload()
        self._seed_device_generator()

    def detachFromDevice(self) -> None:
        """Release the IPUs (other models can use them); the host weights are current (poptorch 3.4 line 1565)."""
        if not self.isCompiled():
            raise Error(NO_EXECUTABLE_ERR)
        if not self._is_attached:
            raise Error("Device is not attached")
        if self._training:
            self.copyWeightsToHostIfNeeded()
        device.release(id(self))
        self._is_attached = False

    def destroy(self) -> None:
        """Free the executable and the IPUs and unwrap the model; the host weights are current (line 1488).

        As in poptorch 3.4 (``_poplar_executor.py:1482-1501``), an executor that never compiled returns at once: a
        training model it wraps stays wrapped, and ``trainingModel`` refuses to wrap it again.
        """
        if not self.isCompiled():
            return
        if self._training:
            self.copyWeightsToHostIfNeeded()
        device.release(id(self))
        self._is_attached = False
        self._executable = None
        if self._training:
            _training_wrapped.pop(self._user_model, None)
            for param in self._user_model.parameters():
                if type(param) is self._parameter_type:
                    param.__class__ = torch.nn.Parameter

    # -- compilation -------------------------------------------------------------------------------------------

    @property
    def _batch_factor(self) -> int:
        opts = self._options
        return (
            opts.device_iterations
            * (opts.replication_factor // opts.input_group_size)
            * opts.Training.gradient_accumulation
        )

    def _micro_batches(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], Any]:
        """Split every tensor input into ``factor`` micro-batches; return per-leaf views ``[factor, B, ...]``."""
        leaves, spec = flatten((args, kwargs))
        factor = self._batch_factor
        opts = self._options
        split: list[Any] = []
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                split.append(leaf)
                continue
            batch = 1 if leaf.dim() == 0 else leaf.shape[0]
            if batch % factor != 0:
                # An assert in poptorch 3.4 (_poplar_executor.py:1521), so an AssertionError.
                raise AssertionError(
                    f"Invalid batch dimension: In the input {leaf.shape}, the batch dimension ({batch}) must be a "
                    f"multiple of Options.deviceIterations({opts.device_iterations}) * "
                    f"(Options.replicationFactor({opts.replication_factor}) / "
                    f"Options.inputReplicaGrouping.input_group_size({opts.input_group_size})) * "
                    f"Options.Training.gradientAccumulation({opts.Training.gradient_accumulation}) = {factor} "
                    "because it is used to calculate the batch size which will be executed on the device in any "
                    "given iteration. For a full explanation see the batching semantics page of the documentation."
                )
            if leaf.dim() == 0:
                split.append(leaf.reshape(1).expand(factor))
            else:
                split.append(leaf.reshape(factor, batch // factor, *leaf.shape[1:]))
        return split, spec

    @staticmethod
    def _micro_batch(split: list[Any], spec: Any, index: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        leaves = [leaf[index] if isinstance(leaf, torch.Tensor) else leaf for leaf in split]
        args, kwargs = unflatten(leaves, spec)
        return tuple(args), dict(kwargs)

    def _signature(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
        return [
            (name, ("tensor", value.dtype, value.shape) if isinstance(value, torch.Tensor) else ("value", value))
            for name, value in _describe(self._user_model, args, kwargs)
        ]

    def _validate(self, signature: list[tuple[str, Any]]) -> None:
        assert self._executable is not None
        compiled = self._executable.signature
        if len(signature) != len(compiled):
            raise Error(
                f"Number of inputs mismatch: expected {len(compiled)} input values but got {len(signature)}."
                f"{_MISMATCH_END}"
            )
        for (name, expected), (_, got) in zip(compiled, signature):
            if expected[0] != got[0]:
                raise Error(f"Type mismatch for {name}: expected {expected[0]} but got {got[0]}.{_MISMATCH_END}")
            if expected[0] == "tensor":
                if expected[1] != got[1]:
                    raise Error(
                        f"Data type mismatch for {name}: expected {expected[1]} but got {got[1]}.{_MISMATCH_END}"
                    )
                if expected[2] != got[2]:
                    raise Error(f"Shape mismatch for {name}: expected {expected[2]} but got {got[2]}.{_MISMATCH_END}")
            elif expected[1] != got[1]:
                raise Error(f"Value mismatch for {name}: expected {expected[1]} but got {got[1]}.{_MISMATCH_END}")

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Compile the model for inputs shaped like ``args`` (a full host batch) and attach to the IPUs."""
        if self.isCompiled():
            log.warning("Call to compile() ignored: the model is already compiled.")
            return
        started = datetime.datetime.now()
        for hook in _PRE_COMPILE_HOOKS.values():
            hook()
        split, spec = self._micro_batches(args, kwargs)
        first_args, first_kwargs = self._micro_batch(split, spec, 0)
        _refuse_inputs_requiring_grad((first_args, first_kwargs))
        # poptorch moves the model to ipu:0 to trace it and moves back only its parameters and buffers.
        move_model_to_ipu(self._model)
        self._upload()
        names = {id(self._device_state[name]): name for name, _ in self._model.named_parameters()}
        context = DeviceContext(names, record=True, stages=self._options._execution_strategy.stage_manager())
        context.training = self._training
        opts = self._options
        # In-place writes to weights and buffers are refused when replicas share broadcast buffers
        # (poptorch/source/LowerToPopartFactories.cpp:41-43, SessionOptions.cpp:468-471).
        replicas_needing_broadcast = opts.input_group_size < opts.replication_factor and opts.broadcast_buffers
        state_names = list(self._device_state)
        # The trace is a dry run: it must not consume random numbers or move running statistics.
        trace_state = [
            tensor if name in names.values() else tensor.clone() for name, tensor in self._device_state.items()
        ]
        leaves, input_spec = flatten((first_args, first_kwargs))
        # The trace runs the model once on real tensors: on copies, so that an in-place write to an input is made
        # once, by the run that follows, as poptorch makes it (PoplarExecutable.cpp:165-172).
        leaves = [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        loss_errors: list[Error] = []

        def call(state: list[torch.Tensor], inputs: list[Any]) -> tuple[Any, torch.Tensor | None]:
            call_args, call_kwargs = unflatten(inputs, input_spec)
            if replicas_needing_broadcast:
                context.state_names = {id(tensor): name for name, tensor in strict_zip(state_names, state)}
            with self._device_weights(dict(strict_zip(state_names, state))), running_on(context):
                output = self._model(*call_args, **call_kwargs)
            if not self._training:
                return _host_output_types(output), None
            try:
                loss = final_loss(context.losses)
            except Error as err:
                # poptorch looks for the loss while lowering to PopART, after refusing the operators it cannot
                # lower (LowerToPopartFactories.cpp:99-103): the graph is checked first.
                loss_errors.append(err)
                loss = torch.zeros(())
            return _host_output_types(output), loss

        # Modules keep the train/eval mode the user set: poptorch never calls train() or eval() (python/, 3.4).
        with torch.random.fork_rng(devices=[]), torch.set_grad_enabled(self._training):
            program = trace(call, trace_state, leaves, context.decomposed_calls)
        if loss_errors:
            raise loss_errors[0]
        if context.inplace_writes:
            # poptorch/source/InplaceOps.cpp:226-233; tests/buffers_test.py::test_failing_on_replicas.
            raise Error(
                "PopTorch does not support broadcasting buffers. If your model is able to tolerate buffers becoming "
                "out of sync between replicas, you can disable buffer broadcasting using "
                "poptorch.Options.broadcastBuffers(False)."
            )
        stages = context.forward_stages
        self._check_pipeline(stages)
        num_ipus = device.reserve_count(
            context.used_ipus, self._options.replication_factor, self._options.auto_round_num_ipus
        )
        # An offline target (ConnectionType.Never) compiles without attaching (CompilerImpl.cpp:670-691).
        if self._options.connection_type != ConnectionType.Never:
            device.acquire(id(self), num_ipus)
            self._is_attached = True
            self._seed_device_generator()
        self._compiled_optimizer_values = self._optimizer_values
        self._executable = _Compiled(
            self._signature(first_args, first_kwargs),
            context,
            num_ipus,
            stages,
            program,
            state_names,
            datetime.datetime.now() - started,
        )
        for hook in _POST_COMPILE_HOOKS.values():
            hook()
        self._write_report()

    def _check_pipeline(self, stages: int) -> None:
        if stages <= 1 or not self._options._execution_strategy.pipelined:
            return
        if self._training:
            pipeline_stages = 2 * stages - 1
            if self._options.Training.gradient_accumulation < pipeline_stages:
                raise Error(
                    "poptorch.Options().Training.gradientAccumulation must be greater than or equal to the number of "
                    f"pipeline stages ({pipeline_stages}) when using poptorch.PipelinedExecution. Please note that a "
                    f"model with {stages} pipeline stages in PopTorch will have an additional {stages - 1} stages "
                    "when training."
                )
        elif self._options.device_iterations < stages:
            raise Error(
                "poptorch.Options().deviceIterations must be greater than or equal to the number of pipeline stages "
                f"({stages}) when using PopTorch.PipelinedExecution."
            )

    def _write_report(self) -> None:
        assert self._executable is not None
        context = self._executable.context
        opts = self._options
        name = opts.model_name if opts.exists("model_name") else ("training" if self._training else "inference")
        params = dict(self._model.named_parameters())
        ipus = []
        for ipu in range(context.used_ipus):
            used = sorted(context.parameters.get(ipu, set()))
            operators = dict(sorted(context.operators.get(ipu, {}).items()))
            ipus.append(
                {
                    "ipu": ipu,
                    "parameters": used,
                    "parameter_elements": sum(params[p].numel() for p in used if p in params),
                    "parameter_bytes": sum(params[p].numel() * params[p].element_size() for p in used if p in params),
                    "operators": operators,
                    "operator_count": sum(operators.values()),
                }
            )
        report.write_report(
            name,
            {
                "model_name": name,
                "executor": "training" if self._training else "inference",
                "options": {
                    "device_iterations": opts.device_iterations,
                    "replication_factor": opts.replication_factor,
                    "gradient_accumulation": opts.Training.gradient_accumulation,
                    "output_mode": OutputMode(opts.output_mode).name,
                    "output_return_period": opts.output_return_period,
                    "reduction": ReductionType(opts.Training.accumulation_and_replication_reduction_type).name,
                },
                "ipus_per_replica": context.used_ipus,
                "replicas": opts.replication_factor,
                "ipus_reserved": self._executable.num_ipus,
                "execution": "sharded" if isinstance(opts._execution_strategy, ShardedExecution) else "pipelined",
                "pipeline_stages": self._executable.stages,
                "inputs": [
                    {"name": n, "shape": list(s[2]), "dtype": str(s[1])}
                    for n, s in self._executable.signature
                    if s[0] == "tensor"
                ],
                "ipus": ipus,
            },
        )

    # -- execution ---------------------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run one host call: ``device_iterations`` iterations over the micro-batches in ``args``."""
        # An assert in poptorch 3.4 (_poplar_executor.py:1232-1235).
        assert self._options.connection_type != ConnectionType.Never, (
            "Trying to run a model on an offline device (ConnectionType.Never): use model.compile(inputs) instead of "
            "model(inputs)"
        )
        if not self.isCompiled():
            self.compile(*args, **kwargs)
        split, spec = self._micro_batches(args, kwargs)
        self._validate(self._signature(*self._micro_batch(split, spec, 0)))
        if not self._is_attached:
            log.info("Attaching to device")
            self.attachToDevice()
        if not self._training:
            self._follow_training_weights()
        inputs = [leaf for leaf in split if isinstance(leaf, torch.Tensor)]
        if self._training:
            self._write_optimizer_state_if_needed()
        with self._device_generator():
            outputs = self._run_training(inputs) if self._training else self._run_inference(inputs)
        if self._training:
            # The host copy follows now (the emulator's eager copy, not counted) and is marked dirty as poptorch
            # marks it: the next read of a parameter counts one copy to the host.
            self._dirty_host_weights = False
            self._download()
            self._dirty_host_weights = True
        return self._gather(outputs)

    def _follow_training_weights(self) -> None:
        """Upload the host weights when the training executor of the same model has updated them since."""
        reference = _training_wrapped.get(self._user_model)
        trainer = reference() if reference is not None else None
        if trainer is None:
            return
        trainer.copyWeightsToHostIfNeeded()
        if trainer._host_weights_version != self._host_weights_version:
            log.debug("Implicit copyWeightsToDevice()")
            self.copyWeightsToDevice()
            self._host_weights_version = trainer._host_weights_version

    def _runner(self, inputs: list[torch.Tensor]) -> Any:
        """Run the compiled program on micro-batch ``index`` of ``inputs`` (weights as they are at that moment)."""
        assert self._executable is not None
        program = self._executable.program
        names = self._executable.state_names
        states = [[self._device_state[name] for name in names]]
        states += [[own.get(name, self._device_state[name]) for name in names] for own in self._replica_buffers]
        micro_batches = [leaf.unbind(0) for leaf in inputs]
        opts = self._options
        replicas = opts.replication_factor
        # With inputReplicaGrouping, the replicas of a group take the same micro-batch: a host call holds
        # replicas / input_group_size of them per step (options.py:1474-1506; CommGroupType's groups, enums.py:234-256).
        groups = replicas // opts.input_group_size
        consecutive = opts.input_cgt != CommGroupType.Orthogonal

        def run(index: int) -> tuple[Any, torch.Tensor | None]:
            # Runs are laid out [device_iterations][gradient_accumulation][replicas], micro-batches
            # [device_iterations][gradient_accumulation][input groups].
            step, replica = divmod(index, replicas)
            group = replica // opts.input_group_size if consecutive else replica % groups
            micro_batch = step * groups + group
            return program.run_leaves(states[replica % len(states)], [leaf[micro_batch] for leaf in micro_batches])

        return run

    def _run_inference(self, inputs: list[torch.Tensor]) -> list[Any]:
        run = self._runner(inputs)
        with torch.no_grad():
            runs = self._options.device_iterations * self._options.replication_factor
            return [run(index)[0] for index in range(runs)]

    def _run_training(self, inputs: list[torch.Tensor]) -> list[Any]:
        opts = self._options
        accumulation, replicas = opts.Training.gradient_accumulation, opts.replication_factor
        mean = opts.Training.accumulation_and_replication_reduction_type == ReductionType.Mean
        optimizer = self._device_optimizer
        assert optimizer is not None
        base_loss_scaling = getattr(self._optimizer, "loss_scaling", 1.0)
        automatic = self._automatic_loss_scaling
        max_grad_norm = getattr(self._optimizer, "max_grad_norm", float("inf"))
        params = [p for group in optimizer.param_groups for p in group["params"]]
        outputs = []
        run = self._runner(inputs)
        seed: torch.Tensor | None = None
        backward = _autograd_engine().run_backward
        with torch.enable_grad():
            for iteration in range(opts.device_iterations):
                # PopART scales the loss by loss_scaling x lossScaleUpdateFactor (its finalLossScale).
                loss_scaling = base_loss_scaling * self._loss_scale_update_factor if automatic else base_loss_scaling
                scale = loss_scaling / (accumulation * replicas) if mean else loss_scaling
                if automatic:
                    seed = None
                for param in params:
                    param.grad = None
                for step in range(accumulation * replicas):
                    index = iteration * accumulation * replicas + step
                    out, loss = run(index)
                    assert loss is not None
                    if seed is None:
                        seed = torch.full_like(loss, scale)
                    # What loss.backward(seed) runs, without its per-call checks of what this loop made itself (a
                    # scalar loss and a seed of its shape): they cost as much as a small model's backward.
                    backward((loss,), (seed,), False, False, (), allow_unreachable=True, accumulate_grad=True)
                    outputs.append([leaf.detach() if isinstance(leaf, torch.Tensor) else leaf for leaf in out])
                with torch.no_grad():
                    grads = [p for p in params if p.grad is not None]
                    if automatic:
                        self._loss_scale_update_factor = als.updated_factor(
                            self._loss_scale_update_factor, [p.grad for p in grads], self._options
                        )
                    if loss_scaling != 1.0:
                        for param in grads:
                            param.grad.div_(loss_scaling)
                    if max_grad_norm != float("inf") and grads:
                        torch.nn.utils.clip_grad_norm_(grads, max_grad_norm)
                optimizer.step()
        return outputs

    def _gather(self, leaves_per_output: list[list[Any]]) -> Any:
        """Combine the per-micro-batch outputs (each as its leaves) as the output mode says."""
        opts = self._options
        accumulation, replicas = opts.Training.gradient_accumulation, opts.replication_factor
        per_iteration = accumulation * replicas
        mode = OutputMode(opts.output_mode)
        assert self._executable is not None
        spec = self._executable.program.output_spec
        combined = []
        for position in range(len(leaves_per_output[0])):
            values = [leaves[position] for leaves in leaves_per_output]
            if not isinstance(values[0], torch.Tensor):
                combined.append(values[-1])
                continue
            if mode == OutputMode.All:
                selected = values
            elif mode == OutputMode.Final:
                selected = values[-replicas:]
            elif mode == OutputMode.EveryN:
                period = opts.output_return_period
                selected = [
                    value
                    for iteration in range(opts.device_iterations)
                    if (iteration + 1) % period == 0
                    for value in values[iteration * per_iteration : (iteration + 1) * per_iteration]
                ]
            else:  # Sum: per replica, over every micro-batch of the call
                selected = [torch.stack(values[r::replicas]).sum(dim=0) for r in range(replicas)]
            combined.append(_concat(selected))
        result = unflatten(combined, spec)
        return result


def _refuse_inputs_requiring_grad(inputs: Any) -> None:
    """Refuse an input that requires grad, as poptorch does when it compiles (``_poplar_executor.py:839-846``)."""
    tensors = [leaf for leaf in flatten(inputs)[0] if isinstance(leaf, torch.Tensor)]
    for index, tensor in enumerate(tensors):
        if tensor.requires_grad:
            raise Error(poptorch_message("input_requires_grad", index=index, tensor=tensor))


def _autograd_engine() -> Any:
    """The C++ autograd engine that ``Tensor.backward`` calls in the end (the same object in torch 2.0 to 2.13)."""
    from torch.autograd.variable import Variable

    return Variable._execution_engine


def _host_output_types(value: Any) -> Any:
    """Poptorch returns int64 outputs as int32 and float64 ones as float32 (``_poplar_executor.py:865-874``)."""
    leaves, spec = flatten(value)
    converted = {torch.int64: torch.int32, torch.float64: torch.float32}
    return unflatten(
        [
            leaf.to(converted[leaf.dtype]) if isinstance(leaf, torch.Tensor) and leaf.dtype in converted else leaf
            for leaf in leaves
        ],
        spec,
    )


def _concat(values: list[torch.Tensor]) -> torch.Tensor:
    if len(values) == 1:
        return values[0]
    if values[0].dim() == 0:
        return torch.stack(values)
    return torch.cat(values, dim=0)


def _unwrap(model: Any) -> torch.nn.Module:
    return model._user_model if isinstance(model, PoplarExecutor) else model


def trainingModel(
    model: torch.nn.Module, options: Options | None = None, optimizer: torch.optim.Optimizer | None = None
) -> PoplarExecutor:
    """Wrap ``model`` for training: each call runs forward, backward and ``device_iterations`` weight updates.

    Without an optimizer, ``torch.optim.SGD(lr=0.01)`` is used. The model must compute exactly one final loss.

    Example:
        >>> import torch.nn.functional as F
        >>> class Net(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = torch.nn.Linear(2, 1)
        ...     def forward(self, x, y):
        ...         return F.mse_loss(self.fc(x), y)
        >>> executor = trainingModel(Net(), Options().deviceIterations(3))
        >>> executor(torch.ones(6, 2), torch.zeros(6, 1)).shape
        torch.Size([])
        >>> executor.destroy()
    """
    model = _unwrap(model)
    if model in _training_wrapped:
        raise RuntimeError(
            "Model has already been wrapped in 'poptorch.trainingModel'. Call model.destroy() on the model to "
            "unwrap before wrapping again."
        )
    return PoplarExecutor(model, options, training=True, optimizer=optimizer)


def inferenceModel(model: torch.nn.Module, options: Options | None = None) -> PoplarExecutor:
    """Wrap ``model`` for inference; by default each call returns the outputs of every micro-batch.

    Example:
        >>> executor = inferenceModel(torch.nn.Linear(3, 1))
        >>> executor(torch.ones(2, 3)).shape
        torch.Size([2, 1])
        >>> executor.destroy()
    """
    return PoplarExecutor(_unwrap(model), options, training=False)
