"""PopART's optimizer state and optimizer inputs: what poptorch 3.4 reads into ``ipu_state`` and ``ipu_param``.

poptorch's ``optimizer.state_dict()`` of a compiled training model holds two dictionaries read from PopART
(``readOptimizerState``, poptorch ``python/poptorch.cpp:959-990``; ``Compiler::optimizerTensorMetadataList``,
``popart_compiler/source/Compiler.cpp:1364-1405``):

- ``ipu_state``: PopART's optimizer state tensors, the variables named ``Accl___``, ``Accl1___``, ``Accl2___``,
  ``Accl3___`` or ``Step___`` followed by the weight's name (popart ``willow/src/tensornames.cpp:165-175``). The
  optimizer patterns create them, with their initial values, when the model is compiled (see the variants below);
- ``ipu_param``: PopART's optimizer inputs, one stream tensor per *non-constant* compound scalar of a weight's update
  (``getOptimizerInputs``, ``willow/src/sgd.cpp:547-599``, ``adam.cpp:503-530``, ``adaptive.cpp:396-420``), named
  ``<scalar>___specific___<weight>`` for a weight poptorch put in a parameter group and ``<scalar>___default___FLOAT``
  for any other (``CompoundScalarHelper::getScalarId``, ``willow/src/compoundscalarhelper.cpp:76-82``; poptorch gives
  every grouped weight its group's values, ``popart_compiler/source/CompilerImpl.cpp:791-809``), plus
  ``lossScaling_FLOAT`` when the loss scaling is not constant (``ir.cpp:510-521``; a constant one becomes a constant
  of the backward pass instead, ``transforms/autodiff/gradgrowerloss.cpp:42-50``). An input no operation reads after
  the optimizer patterns ran is removed with the other isolated tensors (``ir.cpp:1453-1461``,
  ``tensors.cpp:68-96``): PopART's Adam and RMSprop read their loss scaling only through the gradient scaling.

Both are ordered by name, as PopART lists them (``Tensors::getOfType``, ``tensors.cpp:98-108``).

The emulated device runs torch's update (see :mod:`.device_optimizers`), so the state is converted between torch's
entries and PopART's tensors here; each conversion follows the variant's update equations (``willow/include/popart/
sgd.hpp:52-520``, ``adam.hpp``, ``adaptive.hpp``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, MutableMapping

import torch

from .errors import Error
from .optimizer_values import Pair

__all__ = [
    "Layout",
    "Session",
    "Weight",
    "keeps_velocity",
    "optimizer_inputs",
    "read_state",
    "write_inputs",
    "write_state",
]

log = logging.getLogger("poptorch")

# PopART's names of the weight types (``getDataTypeInfoMap``), used in the ``___default___`` names.
_TYPE_NAMES = {torch.float32: "FLOAT", torch.float16: "FLOAT16"}


@dataclass(frozen=True)
class Session:
    """The session options PopART's compound scalars depend on.

    See ``Optimizer::setFactorsFromOptions``, popart ``willow/src/optimizer.cpp:57-72``.

    Attributes:
        replicas: The replication factor.
        accumulation: ``Options.Training.gradientAccumulation``.
        mean: Whether gradients are reduced by ``ReductionType.Mean``.
        post: Whether the mean is taken after the reduction (``MeanReductionStrategy.Post``).
    """

    replicas: int
    accumulation: int
    mean: bool
    post: bool

    @property
    def accumulating(self) -> bool:
        """Whether PopART accumulates: poptorch turns it on above one micro-batch (``Compiler.cpp:704-706``)."""
        return self.accumulation > 1

    @property
    def accumulation_factor(self) -> int:
        return self.accumulation if self.accumulating else 1

    @property
    def post_mean_accumulation(self) -> float:
        """``af`` of the formulas that divide by it after accumulating, else 1."""
        return float(self.accumulation_factor) if self.accumulating and self.mean and self.post else 1.0

    @property
    def post_mean_replication(self) -> float:
        """``rf`` of the formulas that divide by it after the all-reduce, else 1."""
        return float(self.replicas) if self.replicas > 1 and self.mean and self.post else 1.0


@dataclass(frozen=True)
class Weight:
    """One trainable weight of the compiled model, as PopART's optimizer sees it.

    Attributes:
        name: The weight's name in the model (PopART's tensor id).
        tensor: The device's copy of the weight.
        hyper: ``(value, is_const)`` of its hyper-parameters (its group's, or the defaults), ``loss_scaling`` too.
        specific: Whether poptorch gave PopART values specific to this weight (it is in a parameter group).
    """

    name: str
    tensor: torch.Tensor
    hyper: Mapping[str, Pair]
    specific: bool


@dataclass(frozen=True)
class Layout:
    """What decides PopART's optimizer for every weight: the optimizer's kind, global attributes and the session.

    Attributes:
        kind: ``"SGD"``, ``"Adam"``, ``"AdamW"``, ``"RMSprop"`` or ``"LAMB"``.
        attributes: The global device attributes poptorch sends (accumulator types, ``use_combined_accum``, ...).
        centered: RMSprop's ``centered`` (PopART's ``CenteredRMSProp`` mode).
        session: The session options.
    """

    kind: str
    attributes: Mapping[str, Any]
    centered: bool
    session: Session

    def variant(self, weight: Weight) -> _Variant:
        """The PopART optimizer op that updates ``weight``."""
        hyper = _Hyper(self._hyper(weight))
        attributes = self.attributes
        if self.kind == "SGD":
            if not _has_momentum(hyper):
                return _SGD0(hyper)
            if attributes.get("use_combined_accum", False):
                return _SGD1(hyper)
            return _SGD2(hyper, attributes.get("velocity_accum_type", torch.float32))
        first = attributes.get("first_order_momentum_accum_type", torch.float32)
        second = attributes.get("second_order_momentum_accum_type", torch.float32)
        if self.kind == "RMSprop":
            return _Adaptive(hyper, self.centered, bool(attributes.get("use_tf_variant", False)), first, second)
        # poptorch maps LAMB without bias correction to LambNoBias, which keeps no step; AdamW without it stays
        # AdamMode::Adam (CompilerImpl.cpp:873-884 has no case for ADAMW_NO_BIAS), which keeps one.
        step = not (self.kind == "LAMB" and not attributes.get("bias_correction", True))
        return _Adam(hyper, step, first, second)

    def _hyper(self, weight: Weight) -> Mapping[str, Pair]:
        if self.kind == "SGD" and not self.attributes.get("use_combined_accum", False):
            # The separate variant's velocity scaling is the loss scaling, value and constness
            # (CompilerImpl.cpp:819-826, 855-860).
            return {**weight.hyper, "velocity_scaling": weight.hyper["loss_scaling"]}
        return weight.hyper


def keeps_velocity(layout: Layout, hyper: Mapping[str, Pair]) -> bool:
    """Whether PopART keeps a velocity for weights with these hyper-parameters although their momentum may be 0.

    A variable momentum is a velocity tensor whatever its value: SGD's ``hasMomentum`` (``sgd.cpp:152-155``) and
    RMSprop's ``useMomentum`` (``patterns/adaptivedecompose.cpp:97-100``).
    """
    if layout.kind not in ("SGD", "RMSprop"):
        return False
    return _has_momentum(_Hyper(hyper))


def optimizer_inputs(layout: Layout, weights: list[Weight]) -> dict[str, torch.Tensor]:
    """``ipu_param``: the value of every non-constant optimizer input of the compiled model.

    Example:
        >>> layout = Layout("SGD", {}, False, Session(replicas=1, accumulation=1, mean=True, post=True))
        >>> hyper = {"lr": (0.05, False), "momentum": (0.0, True), "dampening": (0.0, True),
        ...          "weight_decay": (0.025, False), "nesterov": (False, True), "loss_scaling": (0.75, False)}
        >>> inputs = optimizer_inputs(layout, [Weight("w", torch.zeros(2), hyper, True)])
        >>> for name, value in inputs.items():
        ...     print(name, round(float(value), 6))
        lossScaling_FLOAT 0.75
        scaledLearningRate0___specific___w 0.066667
        weightDecayScaleFactor0___specific___w 0.99875
    """
    inputs: dict[str, torch.Tensor] = {}
    for weight in weights:
        for item in layout.variant(weight).inputs(layout.session):
            if item.const:
                continue
            dtype = weight.tensor.dtype if item.weight_typed else torch.float32
            inputs[_input_name(item.scalar, weight)] = item.value.to(dtype)
    if weights:
        value, const = weights[0].hyper["loss_scaling"]
        if not const:
            inputs["lossScaling_FLOAT"] = _f32(value)
    return dict(sorted(inputs.items()))


def read_state(
    layout: Layout, weights: list[Weight], device_state: Mapping[torch.Tensor, Mapping[str, Any]]
) -> dict[str, torch.Tensor]:
    """``ipu_state``: PopART's state tensors of every weight, from the device optimizer's torch state.

    A weight torch has no state for yet (torch creates it at the first step) reads as PopART's initial values.
    """
    state: dict[str, torch.Tensor] = {}
    for weight in weights:
        state.update(layout.variant(weight).read(weight, device_state.get(weight.tensor, {})))
    return dict(sorted(state.items()))


def write_state(
    layout: Layout,
    weights: list[Weight],
    device_state: MutableMapping[torch.Tensor, dict[str, Any]],
    written: Mapping[str, Any],
) -> list[str]:
    """Write ``ipu_state`` to the device optimizer; return the names the compiled model has no tensor for.

    A state tensor the dictionary lacks keeps its value, with poptorch's warning (``writeOptimizerState``,
    ``python/poptorch.cpp:1003-1015``; ``WeightsIO::updateData`` skips it, ``CompilerImpl.cpp:384-391``).

    Raises:
        Error: For an entry that is not a tensor of the state tensor's shape.
    """
    known: set[str] = set()
    for weight in weights:
        variant = layout.variant(weight)
        current = variant.read(weight, device_state.get(weight.tensor, {}))
        known.update(current)
        given = {
            name: _checked("ipu_state", name, written[name], value)
            for name, value in current.items()
            if name in written
        }
        for name in current:
            if name not in given:
                log.warning("writeOptimizerState: ignoring missing state %s", name)
        if given:
            # Only a weight with something to write changes: torch creates a missing state lazily, and its first
            # step depends on that.
            device_state[weight.tensor] = variant.write(
                weight, dict(device_state.get(weight.tensor, {})), {**current, **given}
            )
    return sorted(set(written) - known)


def write_inputs(current: Mapping[str, torch.Tensor], written: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The host copies of the optimizer inputs after writing ``ipu_param`` (missing ones warn and keep their value).

    poptorch copies each value into PopART's host buffer of the input (``python/poptorch.cpp:1017-1032``). That
    buffer reaches the device only by ``optimizerFromHost``, and PopART refills it from the optimizer's values just
    before each one (``Executablex::updateOptimizerTensors``, ``popx/executablex.cpp:293-297``, called at attach,
    ``popx/devicex.cpp:1585-1590``, and by ``updateOptimizerFromHost``, ``session.cpp:1007-1023``): a written value
    is read back until the next optimizer update, and the device never uses it.

    Raises:
        Error: For an entry that is not a tensor of one element.
    """
    inputs = dict(current)
    for name, value in current.items():
        if name in written:
            inputs[name] = _checked("ipu_param", name, written[name], value)
        else:
            log.warning("writeOptimizerState: ignoring missing parameter %s", name)
    return inputs


# -- helpers --------------------------------------------------------------------------------------------------


def _f32(value: Any) -> torch.Tensor:
    """A float32 scalar: PopART computes its compound scalars in C++ ``float``."""
    return torch.tensor(float(value), dtype=torch.float32)


def _input_name(scalar: str, weight: Weight) -> str:
    if weight.specific:
        return f"{scalar}___specific___{weight.name}"
    return f"{scalar}___default___{_TYPE_NAMES.get(weight.tensor.dtype, 'FLOAT')}"


def _checked(where: str, name: str, value: Any, reference: torch.Tensor) -> torch.Tensor:
    """``value`` as a copy with ``reference``'s type, after checking it can stand for it."""
    if not isinstance(value, torch.Tensor):
        raise Error(f"{where}[{name!r}] must be a torch.Tensor, got {type(value).__name__}.")
    if value.shape != reference.shape:
        raise Error(
            f"{where}[{name!r}] has shape {tuple(value.shape)}, but the compiled model's {name} has shape "
            f"{tuple(reference.shape)}."
        )
    if value.is_complex() or value.dtype == torch.bool:
        raise Error(f"{where}[{name!r}] must hold real numbers, got {value.dtype}.")
    return value.detach().to(device=reference.device, dtype=reference.dtype).clone()


class _Hyper:
    """One weight's hyper-parameters as PopART holds them: float32 values and their constness."""

    def __init__(self, pairs: Mapping[str, Pair]) -> None:
        self._pairs = pairs

    def __getitem__(self, name: str) -> torch.Tensor:
        return _f32(self._pairs[name][0])

    def value(self, name: str) -> float:
        return float(self._pairs[name][0])

    def const(self, *names: str) -> bool:
        """Whether every one of ``names`` is constant; PopART's unset values (absent here) are constants."""
        return all(self._pairs[name][1] for name in names if name in self._pairs)


def _has_momentum(hyper: _Hyper) -> bool:
    return "momentum" in hyper._pairs and (not hyper.const("momentum") or hyper.value("momentum") != 0.0)


@dataclass(frozen=True)
class _Input:
    """One compound scalar of a weight's update: its PopART name, value and whether it is a constant."""

    scalar: str
    value: torch.Tensor
    const: bool
    weight_typed: bool = False  # SGD's momentum terms and wdsf0 take the weight's type (sgd.cpp:584-592)


class _Variant:
    """One PopART optimizer op: its inputs and its state tensors, read from and written to torch's state."""

    def __init__(self, hyper: _Hyper) -> None:
        self.hyper = hyper

    def inputs(self, session: Session) -> list[_Input]:
        raise NotImplementedError

    def read(self, weight: Weight, state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        return {}

    def write(self, weight: Weight, state: dict[str, Any], values: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        return state


def _torch_entry(state: Mapping[str, Any], key: str, default: torch.Tensor) -> torch.Tensor:
    value = state.get(key)
    return value.detach() if isinstance(value, torch.Tensor) else default


class _SGD0(_Variant):
    """SGD with a constant momentum of 0: no state (``willow/include/popart/sgd.hpp:431-450``)."""

    def inputs(self, session: Session) -> list[_Input]:
        h = self.hyper
        lr, dm, wd, ls = h["lr"], h["dampening"], h["weight_decay"], h["loss_scaling"]
        af, rf = session.post_mean_accumulation, session.post_mean_replication
        return [
            # compoundscalarhelper.hpp:75-77, .cpp:146-164.
            _Input("scaledLearningRate0", (lr * (1 - dm)) / (ls * af * rf), h.const("lr", "loss_scaling", "dampening")),
            # compoundscalarhelper.hpp:58-60, .cpp:130-144.
            _Input(
                "weightDecayScaleFactor0",
                1 - lr * (1 - dm) * wd,
                h.const("weight_decay", "lr", "dampening"),
                weight_typed=True,
            ),
        ]


def _nesterov(hyper: _Hyper) -> bool:
    # SGD::enableNesterov, sgd.cpp:157-161.
    return hyper.value("nesterov") != 0 and hyper.value("momentum") > 0


def _nesterov_inputs(hyper: _Hyper) -> list[_Input]:
    return [
        # compoundscalarhelper.hpp:203, 218; .cpp:283-304.
        _Input("sgdMomentum", hyper["momentum"], hyper.const("momentum"), weight_typed=True),
        _Input("sgdWeightDecay", hyper["weight_decay"], hyper.const("weight_decay")),
    ]


class _SGD1(_Variant):
    """SGD with momentum, combined accumulator and velocity (``use_combined_accum=True``; ``sgd.hpp:458-490``).

    Its state ``Accl___<w>`` holds, between steps, the next velocity's precomputed part
    ``mm * v + (1 - dm) * wd * vs * w`` (``sgd.hpp:241-257``), where ``v = vs * momentum_buffer``; it starts at
    ``(1 - dm) * wd * vs * w`` (``patterns/sgd1decompose.cpp:47-84``). With Nesterov, ``Accl___<w>_nesterovGrad``
    accumulates gradients and is zero between steps (``sgd1decompose.cpp:458``). The emulator derives ``Accl`` from
    the weight as it is: PopART keeps the value computed from the weight the last step left.
    """

    def inputs(self, session: Session) -> list[_Input]:
        h = self.hyper
        lr, mm, dm, wd, vs, ls = (
            h["lr"],
            h["momentum"],
            h["dampening"],
            h["weight_decay"],
            h["velocity_scaling"],
            h["loss_scaling"],
        )
        replicas = float(session.replicas)
        rf_accumulating = replicas if session.accumulating else 1.0
        af = float(session.accumulation_factor) if session.mean else 1.0
        if session.accumulating and not session.mean:
            rf = replicas
        elif not session.accumulating and session.mean:
            rf = 1.0 / replicas
        else:
            rf = 1.0
        inputs = [
            # compoundscalarhelper.hpp:88-150, .cpp:166-235.
            _Input("scaledWeightDecay1", (1 - dm) * wd * vs, h.const("dampening", "weight_decay", "velocity_scaling")),
            _Input("scaledLearningRate1", lr / (vs * rf_accumulating), h.const("lr", "velocity_scaling")),
            _Input("scaledMomentum1", mm / rf_accumulating, h.const("momentum"), weight_typed=True),
            _Input(
                "dampeningScaleFactor1",
                (1 - dm) * vs * rf / (ls * af),
                h.const("dampening", "velocity_scaling", "loss_scaling"),
            ),
        ]
        if _nesterov(h):
            post_af = session.post_mean_accumulation
            inputs += [
                # compoundscalarhelper.hpp:229-274, .cpp:306-355.
                _Input(
                    "nesterovDampeningScaleFactor1",
                    post_af / ((1 - dm) * vs * rf),
                    h.const("dampening", "velocity_scaling", "loss_scaling"),
                ),
                _Input("nesterovGradScaleFactor1", vs * rf_accumulating, h.const("velocity_scaling")),
                *_nesterov_inputs(h),
            ]
        return inputs

    def _terms(self) -> tuple[float, float]:
        """``swd1 = (1 - dm) * wd * vs`` and ``vs * mm``, the weight's and the velocity's share of ``Accl``."""
        h = self.hyper
        swd1 = float((1 - h["dampening"]) * h["weight_decay"] * h["velocity_scaling"])
        return swd1, h.value("velocity_scaling") * h.value("momentum")

    def read(self, weight: Weight, state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        swd1, scale = self._terms()
        tensor = weight.tensor.detach()
        accl = tensor * swd1
        buffer = state.get("momentum_buffer")
        if isinstance(buffer, torch.Tensor):
            accl = accl.add(buffer.detach(), alpha=scale)
        read = {f"Accl___{weight.name}": accl}
        if _nesterov(self.hyper):
            read[f"Accl___{weight.name}_nesterovGrad"] = torch.zeros_like(tensor, dtype=torch.float32)
        return read

    def write(self, weight: Weight, state: dict[str, Any], values: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        swd1, scale = self._terms()
        accl = values[f"Accl___{weight.name}"].to(weight.tensor.dtype)
        if scale != 0.0:
            state["momentum_buffer"] = (accl - weight.tensor.detach() * swd1) / scale
        elif not torch.equal(accl, weight.tensor.detach() * swd1):
            log.warning(
                "Accl___%s: at momentum 0 (or velocity scaling 0) the emulated device keeps no velocity, so only the "
                "weight-decay term PopART computes from the weight is used; the written value is not.",
                weight.name,
            )
        nesterov = values.get(f"Accl___{weight.name}_nesterovGrad")
        if nesterov is not None and bool(nesterov.any()):
            log.warning(
                "Accl___%s_nesterovGrad: the emulated device accumulates no gradient between steps; the written "
                "value is not used.",
                weight.name,
            )
        return state


class _SGD2(_Variant):
    """SGD with momentum, separate accumulator and velocity (poptorch's default; ``sgd.hpp:492-520``).

    Its state ``Accl1___<w>`` is the velocity ``v = vs * momentum_buffer`` (``sgd.hpp:121-126``), zeros at first
    (``patterns/sgd2decompose.cpp:79, 133``), of type ``velocity_accum_type`` (``python/poptorch.cpp:385-392``).
    """

    def __init__(self, hyper: _Hyper, dtype: torch.dtype) -> None:
        super().__init__(hyper)
        self.dtype = dtype

    def inputs(self, session: Session) -> list[_Input]:
        h = self.hyper
        lr, mm, dm, wd, vs, ls = (
            h["lr"],
            h["momentum"],
            h["dampening"],
            h["weight_decay"],
            h["velocity_scaling"],
            h["loss_scaling"],
        )
        af, rf = session.post_mean_accumulation, session.post_mean_replication
        inputs = [
            # compoundscalarhelper.hpp:88-103, 152-197; .cpp:221-281.
            _Input("scaledWeightDecay1", (1 - dm) * wd * vs, h.const("dampening", "weight_decay", "velocity_scaling")),
            _Input("scaledLearningRate2", lr / vs, h.const("lr", "velocity_scaling")),
            _Input("scaledMomentum2", mm, h.const("momentum"), weight_typed=True),
            _Input(
                "dampeningScaleFactor2",
                (1 - dm) * vs / (ls * af * rf),
                h.const("dampening", "velocity_scaling", "loss_scaling"),
            ),
        ]
        if _nesterov(h):
            inputs += [
                # compoundscalarhelper.hpp:244-291, .cpp:320-374.
                _Input(
                    "nesterovDampeningScaleFactor2",
                    af * rf / ((1 - dm) * vs),
                    h.const("dampening", "velocity_scaling", "loss_scaling"),
                ),
                _Input("nesterovGradScaleFactor2", vs, h.const("velocity_scaling")),
                *_nesterov_inputs(h),
            ]
        return inputs

    def read(self, weight: Weight, state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        buffer = _torch_entry(state, "momentum_buffer", torch.zeros_like(weight.tensor.detach()))
        return {f"Accl1___{weight.name}": (buffer * self.hyper.value("velocity_scaling")).to(self.dtype)}

    def write(self, weight: Weight, state: dict[str, Any], values: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        scaling = self.hyper.value("velocity_scaling")
        accl1 = values[f"Accl1___{weight.name}"].to(weight.tensor.dtype)
        if scaling == 0.0:
            log.warning("Accl1___%s: a velocity scaling of 0 leaves no velocity to write; ignored.", weight.name)
            return state
        state["momentum_buffer"] = accl1 / scaling
        return state


def _gradient_scaling(scalar: str, hyper: _Hyper, session: Session) -> _Input:
    """``1 / (ls * af * rf)``: Adam's and RMSprop's gradient scaling.

    See ``compoundscalarhelper.hpp:398-411, 518-531`` and ``.cpp:462-477, 545-561``; poptorch's Adam does not scale
    its state, so the loss scaling is in it.
    """
    ls = hyper["loss_scaling"]
    value = 1 / (ls * session.post_mean_accumulation * session.post_mean_replication)
    return _Input(scalar, value, hyper.const("loss_scaling"))


class _Adam(_Variant):
    """Adam, AdamW and LAMB (PopART's ``Adam`` in mode Adam, Lamb or LambNoBias).

    ``Step___<w>`` (float32, one element; only with bias correction), ``Accl1___<w>`` and ``Accl2___<w>``, zeros at
    first (``patterns/adamdecompose.cpp:210-237``), are torch's ``step``, ``exp_avg`` and ``exp_avg_sq``.
    """

    def __init__(self, hyper: _Hyper, step: bool, first: torch.dtype, second: torch.dtype) -> None:
        super().__init__(hyper)
        self.step = step
        self.dtypes = (first, second)

    def inputs(self, session: Session) -> list[_Input]:
        h = self.hyper
        # adam.cpp:503-530 with poptorch's scaledOptimizerState=false (CompilerImpl.cpp:889-893): the weight decay
        # and eps are not scaled; the loss scaling itself is read by no op then (patterns/adamdecompose.cpp:292).
        inputs = [
            _Input("learningRate", h["lr"], h.const("lr")),
            _Input("weightDecay", h["weight_decay"], h.const("weight_decay")),
            _Input("adamBeta1", h["beta1"], h.const("beta1")),
            _Input("adamBeta2", h["beta2"], h.const("beta2")),
            _Input("adamEps", h["eps"], h.const("eps")),
        ]
        if "max_weight_norm" in h._pairs:
            inputs.append(_Input("maxWeightNorm", h["max_weight_norm"], h.const("max_weight_norm")))
        inputs.append(_gradient_scaling("adamGradientScaling", h, session))
        return inputs

    def read(self, weight: Weight, state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        zeros = torch.zeros_like(weight.tensor.detach())
        read = {
            f"Accl1___{weight.name}": _torch_entry(state, "exp_avg", zeros).to(self.dtypes[0]),
            f"Accl2___{weight.name}": _torch_entry(state, "exp_avg_sq", zeros).to(self.dtypes[1]),
        }
        if self.step:
            step = _torch_entry(state, "step", torch.zeros(()))
            read[f"Step___{weight.name}"] = step.reshape(()).to(torch.float32)
        return read

    def write(self, weight: Weight, state: dict[str, Any], values: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        dtype = weight.tensor.dtype
        state["exp_avg"] = values[f"Accl1___{weight.name}"].to(dtype)
        state["exp_avg_sq"] = values[f"Accl2___{weight.name}"].to(dtype)
        if self.step:
            state["step"] = values[f"Step___{weight.name}"].to(torch.float32).reshape(())
        else:
            # torch's (and the emulator's LAMB's) state has a step even where PopART keeps none.
            state.setdefault("step", torch.zeros((), dtype=torch.float32))
        return state


class _Adaptive(_Variant):
    """RMSprop (PopART's ``Adaptive`` in mode RMSProp or CenteredRMSProp).

    ``Accl1___<w>`` is the squared-gradient average (ones at first in TensorFlow's variant, zeros otherwise),
    ``Accl2___<w>`` the gradient average (centred only) and ``Accl3___<w>`` the momentum, whenever the momentum is
    variable or above 0 (``patterns/adaptivedecompose.cpp:84-100``); Accl3 is float32 (``CompilerImpl.cpp:904-906``).
    No step (torch's ``step`` is not PopART's).
    """

    def __init__(self, hyper: _Hyper, centered: bool, tf: bool, first: torch.dtype, second: torch.dtype) -> None:
        super().__init__(hyper)
        self.centered = centered
        self.tf = tf
        self.momentum = _has_momentum(hyper)
        self.dtypes = (first, second)

    def inputs(self, session: Session) -> list[_Input]:
        h = self.hyper
        # adaptive.cpp:396-420; the loss scaling is read by no op (patterns/adaptivedecompose.cpp).
        return [
            _Input("learningRate", h["lr"], h.const("lr")),
            _Input("weightDecay", h["weight_decay"], h.const("weight_decay")),
            _Input("adaptiveAlpha", h["alpha"], h.const("alpha")),
            _Input("adaptiveMomentum", h["momentum"], h.const("momentum")),
            _Input("adaptiveEps", h["eps"], h.const("eps")),
            _gradient_scaling("adaptiveGradientScaling", h, session),
        ]

    def read(self, weight: Weight, state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        tensor = weight.tensor.detach()
        zeros = torch.zeros_like(tensor)
        first = torch.ones_like(tensor) if self.tf else zeros
        read = {f"Accl1___{weight.name}": _torch_entry(state, "square_avg", first).to(self.dtypes[0])}
        if self.centered:
            read[f"Accl2___{weight.name}"] = _torch_entry(state, "grad_avg", zeros).to(self.dtypes[1])
        if self.momentum:
            read[f"Accl3___{weight.name}"] = _torch_entry(state, "momentum_buffer", zeros).to(torch.float32)
        return read

    def write(self, weight: Weight, state: dict[str, Any], values: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        dtype = weight.tensor.dtype
        state["square_avg"] = values[f"Accl1___{weight.name}"].to(dtype)
        if self.centered:
            state["grad_avg"] = values[f"Accl2___{weight.name}"].to(dtype)
        if self.momentum:
            state["momentum_buffer"] = values[f"Accl3___{weight.name}"].to(dtype)
        # torch's RMSprop counts steps in its state (unused by its update); a state it did not create needs one.
        state.setdefault("step", torch.zeros((), dtype=torch.float32))
        return state
