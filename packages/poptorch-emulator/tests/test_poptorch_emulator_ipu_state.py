"""``ipu_state`` and ``ipu_param``: the optimizer state poptorch 3.4 reads from PopART and writes back.

The cases follow poptorch's ``tests/optimizers_test.py`` (``test_read_ipu_state``, ``test_read_ipu_state_offline``,
``test_write_ipu_state``); the names, formulas and initial values are PopART's, as
:mod:`lightning_accel.poptorch_emulator.optimizer_state` cites them.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from lightning_accel import poptorch_emulator as poptorch

# The values of poptorch's test_read_ipu_state.
LR, WD, LS = 0.05, 0.025, 0.75
WEIGHTS = ("lin.bias", "lin.weight")
INPUT = torch.tensor([[0.5, -1.0, 2.0]])


class Net(torch.nn.Module):
    """One linear layer, ``lin``, trained towards zero."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.lin(x), torch.zeros(x.shape[0], 2))


Make = Callable[[Any], Any]


@pytest.fixture
def train() -> Iterator[Callable[..., tuple[Any, Any, Net]]]:
    """Build a training model of ``net`` (a fresh :class:`Net`) with ``make(parameters)``; destroyed after the test."""
    executors: list[Any] = []

    def build(make: Make, options: Any = None, compile: bool = True, net: Net | None = None) -> tuple[Any, Any, Net]:
        net = net or Net()
        optimizer = make(net.parameters())
        executor = poptorch.trainingModel(net, options, optimizer)
        executors.append(executor)
        if compile:
            executor.compile(INPUT)
        return executor, optimizer, net

    yield build
    for executor in executors:
        executor.destroy()


def _names(prefixes: set[str], *, specific: bool = False) -> set[str]:
    middle = "___specific___" if specific else "___"
    return {f"{prefix}{middle}{weight}" for prefix in prefixes for weight in WEIGHTS}


CASES = {
    "SGD": (
        lambda p: poptorch.optim.SGD(p, lr=LR, weight_decay=WD, loss_scaling=LS),
        set(),
        {"scaledLearningRate0", "weightDecayScaleFactor0"},
    ),
    "SGD-momentum": (
        lambda p: poptorch.optim.SGD(p, lr=LR, momentum=0.9, weight_decay=WD, loss_scaling=LS),
        {"Accl1"},
        {"scaledWeightDecay1", "scaledLearningRate2", "scaledMomentum2", "dampeningScaleFactor2"},
    ),
    "SGD-momentum-combined": (
        lambda p: poptorch.optim.SGD(p, lr=LR, momentum=0.9, weight_decay=WD, loss_scaling=LS, use_combined_accum=True),
        {"Accl"},
        {"scaledWeightDecay1", "scaledLearningRate1", "scaledMomentum1", "dampeningScaleFactor1"},
    ),
    "Adam": (
        lambda p: poptorch.optim.Adam(p, lr=LR, weight_decay=WD, loss_scaling=LS),
        {"Accl1", "Accl2", "Step"},
        {"learningRate", "weightDecay", "adamGradientScaling"},
    ),
    "AdamW": (
        lambda p: poptorch.optim.AdamW(p, lr=LR, weight_decay=WD, loss_scaling=LS),
        {"Accl1", "Accl2", "Step"},
        {"learningRate", "weightDecay", "adamGradientScaling"},
    ),
    # poptorch compiles AdamW without bias correction as PopART's AdamMode::Adam, which keeps a step.
    "AdamW-no-bias": (
        lambda p: poptorch.optim.AdamW(p, lr=LR, weight_decay=WD, loss_scaling=LS, bias_correction=False),
        {"Accl1", "Accl2", "Step"},
        {"learningRate", "weightDecay", "adamGradientScaling"},
    ),
    "RMSprop": (
        lambda p: poptorch.optim.RMSprop(p, lr=LR, weight_decay=WD, loss_scaling=LS),
        {"Accl1"},
        {"learningRate", "weightDecay", "adaptiveGradientScaling"},
    ),
    "RMSprop-centered-momentum": (
        lambda p: poptorch.optim.RMSprop(p, lr=LR, weight_decay=WD, loss_scaling=LS, momentum=0.5, centered=True),
        {"Accl1", "Accl2", "Accl3"},
        {"learningRate", "weightDecay", "adaptiveMomentum", "adaptiveGradientScaling"},
    ),
    "LAMB": (
        lambda p: poptorch.optim.LAMB(p, lr=LR, weight_decay=WD, loss_scaling=LS),
        {"Accl1", "Accl2", "Step"},
        {"learningRate", "weightDecay", "adamGradientScaling"},
    ),
    # PopART's LambNoBias keeps no step.
    "LAMB-no-bias": (
        lambda p: poptorch.optim.LAMB(p, lr=LR, weight_decay=WD, loss_scaling=LS, bias_correction=False),
        {"Accl1", "Accl2"},
        {"learningRate", "weightDecay", "adamGradientScaling"},
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_compiling_fills_the_state_with_poparts_names(train: Any, case: str) -> None:
    make, states, inputs = CASES[case]
    executor, optimizer, _ = train(make, compile=False)
    assert optimizer.state_dict()["ipu_state"] is None
    assert optimizer.state_dict()["ipu_param"] is None
    executor.compile(INPUT)
    state = optimizer.state_dict()
    assert set(state["ipu_state"]) == _names(states)
    # The loss scaling was passed, so it is variable: PopART streams it.
    assert set(state["ipu_param"]) == _names(inputs, specific=True) | {"lossScaling_FLOAT"}
    assert list(state["ipu_param"]) == sorted(state["ipu_param"]), "PopART lists its tensors by name"
    assert all(isinstance(v, torch.Tensor) for v in (*state["ipu_state"].values(), *state["ipu_param"].values()))


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("SGD-momentum-combined")])
def test_the_initial_state_is_poparts(train: Any, case: str) -> None:
    _, optimizer, net = train(CASES[case][0])
    for name, value in optimizer.state_dict()["ipu_state"].items():
        weight = dict(net.named_parameters())[name.split("___")[1]]
        expected = torch.zeros((), dtype=torch.float32) if name.startswith("Step") else torch.zeros_like(weight)
        torch.testing.assert_close(value, expected, rtol=0, atol=0, msg=name)


def test_the_combined_velocity_starts_with_the_weight_decay_term(train: Any) -> None:
    # SGD1's Accl is initialised to (1 - dm) * wd * vs * w (popart sgd1decompose.cpp:47-84).
    make = lambda p: poptorch.optim.SGD(  # noqa: E731
        p, lr=LR, momentum=0.9, dampening=0.2, weight_decay=WD, velocity_scaling=2.0, use_combined_accum=True
    )
    _, optimizer, net = train(make)
    state = optimizer.state_dict()["ipu_state"]
    for name, weight in net.named_parameters():
        torch.testing.assert_close(state[f"Accl___{name}"], weight.detach() * ((1 - 0.2) * WD * 2.0))


def test_tensorflow_rmsprop_starts_its_squared_average_at_one(train: Any) -> None:
    # popart adaptivedecompose.cpp:84-90.
    _, optimizer, net = train(lambda p: poptorch.optim.RMSprop(p, lr=LR, use_tf_variant=True))
    for name, weight in net.named_parameters():
        torch.testing.assert_close(optimizer.state_dict()["ipu_state"][f"Accl1___{name}"], torch.ones_like(weight))


def test_a_float16_accumulator_type_is_the_state_tensors_type(train: Any) -> None:
    make = lambda p: poptorch.optim.Adam(p, lr=LR, first_order_momentum_accum_type=torch.float16)  # noqa: E731
    _, optimizer, _ = train(make)
    state = optimizer.state_dict()["ipu_state"]
    assert {state[f"Accl1___{w}"].dtype for w in WEIGHTS} == {torch.float16}
    assert {state[f"Accl2___{w}"].dtype for w in WEIGHTS} == {torch.float32}
    assert {state[f"Step___{w}"].shape for w in WEIGHTS} == {torch.Size([])}


def _input(optimizer: Any, scalar: str, weight: str = "lin.weight") -> float:
    return float(optimizer.state_dict()["ipu_param"][f"{scalar}___specific___{weight}"])


def test_sgd_without_momentum_takes_scaled_inputs(train: Any) -> None:
    # poptorch's test_read_ipu_state: slr0 = lr * (1 - dm) / ls, wdsf0 = 1 - lr * (1 - dm) * wd with dm = 0.
    _, optimizer, _ = train(CASES["SGD"][0])
    assert _input(optimizer, "scaledLearningRate0") == pytest.approx(LR / LS)
    assert _input(optimizer, "weightDecayScaleFactor0") == pytest.approx(1 - LR * WD)
    assert float(optimizer.state_dict()["ipu_param"]["lossScaling_FLOAT"]) == pytest.approx(LS)


def test_sgd_without_momentum_applies_the_dampening(train: Any) -> None:
    make = lambda p: poptorch.optim.SGD(p, lr=LR, dampening=0.2, weight_decay=WD, loss_scaling=LS)  # noqa: E731
    _, optimizer, _ = train(make)
    assert _input(optimizer, "scaledLearningRate0") == pytest.approx(LR * 0.8 / LS)
    assert _input(optimizer, "weightDecayScaleFactor0") == pytest.approx(1 - LR * 0.8 * WD)


@pytest.mark.parametrize(
    ("reduction", "strategy", "divisor"),
    [
        (poptorch.ReductionType.Mean, poptorch.MeanReductionStrategy.Post, 4),
        (poptorch.ReductionType.Mean, poptorch.MeanReductionStrategy.Running, 1),
        (poptorch.ReductionType.Sum, poptorch.MeanReductionStrategy.Post, 1),
    ],
)
def test_the_post_mean_of_accumulated_gradients_is_in_the_learning_rate(
    train: Any, reduction: Any, strategy: Any, divisor: int
) -> None:
    # popart compoundscalarhelper.cpp:146-156 and optimizer.cpp:57-72: af counts only for a mean taken afterwards.
    options = poptorch.Options()
    options.Training.gradientAccumulation(4)
    options.Training.accumulationAndReplicationReductionType(reduction)
    options.Training.setMeanAccumulationAndReplicationReductionStrategy(strategy)
    executor, optimizer, _ = train(CASES["SGD"][0], options, compile=False)
    executor.compile(INPUT.repeat(4, 1))
    assert _input(optimizer, "scaledLearningRate0") == pytest.approx(LR / (LS * divisor))


def test_sgd_with_separate_velocity_scales_it_by_the_loss_scaling(train: Any) -> None:
    # poptorch sets the separate variant's velocity scaling to the loss scaling (CompilerImpl.cpp:855-860).
    make = lambda p: poptorch.optim.SGD(  # noqa: E731
        p, lr=LR, momentum=0.9, dampening=0.2, weight_decay=WD, loss_scaling=LS
    )
    _, optimizer, _ = train(make)
    assert _input(optimizer, "scaledWeightDecay1") == pytest.approx(0.8 * WD * LS)
    assert _input(optimizer, "scaledLearningRate2") == pytest.approx(LR / LS)
    assert _input(optimizer, "scaledMomentum2") == pytest.approx(0.9)
    assert _input(optimizer, "dampeningScaleFactor2") == pytest.approx(0.8 * LS / LS)


def test_sgd_with_combined_velocity_takes_its_own_scaling(train: Any) -> None:
    make = lambda p: poptorch.optim.SGD(  # noqa: E731
        p,
        lr=LR,
        momentum=0.9,
        dampening=0.2,
        weight_decay=WD,
        loss_scaling=LS,
        velocity_scaling=2.0,
        use_combined_accum=True,
    )
    _, optimizer, _ = train(make)
    assert _input(optimizer, "scaledWeightDecay1") == pytest.approx(0.8 * WD * 2.0)
    assert _input(optimizer, "scaledLearningRate1") == pytest.approx(LR / 2.0)
    assert _input(optimizer, "scaledMomentum1") == pytest.approx(0.9)
    assert _input(optimizer, "dampeningScaleFactor1") == pytest.approx(0.8 * 2.0 / LS)


def test_nesterov_adds_its_inputs(train: Any) -> None:
    make = lambda p: poptorch.optim.SGD(  # noqa: E731
        p, lr=LR, momentum=0.9, nesterov=True, weight_decay=WD, loss_scaling=LS
    )
    _, optimizer, _ = train(make)
    assert _input(optimizer, "nesterovDampeningScaleFactor2") == pytest.approx(1 / LS)
    assert _input(optimizer, "nesterovGradScaleFactor2") == pytest.approx(LS)
    assert _input(optimizer, "sgdMomentum") == pytest.approx(0.9)
    assert _input(optimizer, "sgdWeightDecay") == pytest.approx(WD)


def test_constant_hyper_parameters_are_no_inputs(train: Any) -> None:
    # Nothing passed but lr: the weight decay and the loss scaling are constants, compiled in.
    _, optimizer, _ = train(lambda p: poptorch.optim.Adam(p, lr=LR))
    assert set(optimizer.state_dict()["ipu_param"]) == _names({"learningRate"}, specific=True)


def test_weights_in_no_group_take_the_default_inputs(train: Any) -> None:
    _, optimizer, _ = train(lambda p: poptorch.optim.SGD([next(iter(p))], lr=LR))
    inputs = optimizer.state_dict()["ipu_param"]
    assert set(inputs) == {
        "scaledLearningRate0___specific___lin.weight",
        "weightDecayScaleFactor0___specific___lin.weight",
        "scaledLearningRate0___default___FLOAT",
        "weightDecayScaleFactor0___default___FLOAT",
    }


def test_a_frozen_weight_has_no_state_and_no_inputs(train: Any) -> None:
    net = Net()
    net.lin.bias.requires_grad_(False)
    _, optimizer, _ = train(CASES["Adam"][0], net=net)
    state = optimizer.state_dict()
    assert not [name for name in (*state["ipu_state"], *state["ipu_param"]) if name.endswith("lin.bias")]
    assert "Accl1___lin.weight" in state["ipu_state"]


@pytest.mark.parametrize("case", [c for c in CASES if c != "SGD"])
def test_every_state_tensor_changes_with_a_step(train: Any, case: str) -> None:
    executor, optimizer, _ = train(CASES[case][0])
    before = optimizer.state_dict()["ipu_state"]
    executor(INPUT)
    after = optimizer.state_dict()["ipu_state"]
    assert set(after) == set(before)
    assert [name for name in before if torch.equal(before[name], after[name])] == []


def _all_variable(kind: Any) -> Make:
    """poptorch's test_write_ipu_state: every attribute variable (momentum too, although 0)."""

    def make(params: Any) -> Any:
        optimizer = kind(params, lr=0.0)
        optimizer.variable_attrs._variable_attributes = copy.deepcopy(optimizer.variable_attrs._allowed_attributes)
        return optimizer

    return make


KINDS = [poptorch.optim.SGD, poptorch.optim.Adam, poptorch.optim.AdamW, poptorch.optim.RMSprop, poptorch.optim.LAMB]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("incomplete", [False, True], ids=["complete", "incomplete"])
def test_a_written_state_reads_back(train: Any, kind: Any, incomplete: bool, caplog: Any) -> None:
    executor, optimizer, _ = train(_all_variable(kind))
    original = optimizer.state_dict()
    saved = {**original, "ipu_state": dict(original["ipu_state"]), "ipu_param": dict(original["ipu_param"])}
    missing_param = missing_state = ""
    if incomplete:
        missing_param = next(iter(saved["ipu_param"]))
        missing_state = next(iter(saved["ipu_state"]))
        del saved["ipu_param"][missing_param], saved["ipu_state"][missing_state]
    torch.manual_seed(1)
    saved["ipu_param"] = {k: torch.rand_like(v) + 0.5 for k, v in saved["ipu_param"].items()}
    saved["ipu_state"] = {k: torch.rand_like(v) + 0.5 for k, v in saved["ipu_state"].items()}
    optimizer.load_state_dict(saved)

    # Before the model runs, the host holds the loaded dictionary.
    read = optimizer.state_dict()
    for key in ("ipu_param", "ipu_state"):
        assert read[key].keys() == saved[key].keys()
        assert all(torch.equal(read[key][k], v) for k, v in saved[key].items())

    with caplog.at_level(logging.WARNING, logger="poptorch"):
        executor(INPUT)
    read = optimizer.state_dict()
    # The inputs read back as written; a missing one kept its value.
    assert all(torch.equal(read["ipu_param"][k], v) for k, v in saved["ipu_param"].items())
    # The step changed every state tensor, the one left out too.
    assert [k for k, v in saved["ipu_state"].items() if torch.allclose(v, read["ipu_state"][k])] == []
    if incomplete:
        assert torch.equal(read["ipu_param"][missing_param], original["ipu_param"][missing_param])
        assert not torch.equal(read["ipu_state"][missing_state], original["ipu_state"][missing_state])
        assert f"writeOptimizerState: ignoring missing parameter {missing_param}" in caplog.messages
        assert f"writeOptimizerState: ignoring missing state {missing_state}" in caplog.messages
    else:
        assert not [m for m in caplog.messages if m.startswith("writeOptimizerState")]


def _cpu_steps(net: Net, optimizer: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        net(INPUT).backward()
        optimizer.step()


def _resume_on_ipu(train: Any, make: Make, net: Net, ipu_state: dict[str, torch.Tensor]) -> Net:
    """Compile a copy of ``net`` with ``make``'s optimizer, write ``ipu_state``, run one step; the copy."""
    ipu_net = Net()
    ipu_net.load_state_dict(net.state_dict())
    executor, optimizer, _ = train(make, net=ipu_net)
    saved = optimizer.state_dict()
    optimizer.load_state_dict({**saved, "ipu_state": ipu_state})
    executor(INPUT)
    return ipu_net


def _assert_same_weights(a: Net, b: Net) -> None:
    for (name, x), y in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(x.detach(), y.detach(), msg=name)


def test_a_written_adam_state_is_where_the_update_continues(train: Any) -> None:
    cpu = Net()
    adam = torch.optim.Adam(cpu.parameters(), lr=LR, weight_decay=WD)
    _cpu_steps(cpu, adam, 1)
    state = {}
    for name, param in cpu.named_parameters():
        state.update(
            {
                f"Accl1___{name}": adam.state[param]["exp_avg"].clone(),
                f"Accl2___{name}": adam.state[param]["exp_avg_sq"].clone(),
                f"Step___{name}": adam.state[param]["step"].clone(),
            }
        )
    ipu = _resume_on_ipu(train, lambda p: poptorch.optim.Adam(p, lr=LR, weight_decay=WD, loss_scaling=LS), cpu, state)
    _cpu_steps(cpu, adam, 1)
    _assert_same_weights(ipu, cpu)


def test_a_written_separate_velocity_carries_the_velocity_scaling(train: Any) -> None:
    cpu = Net()
    sgd = torch.optim.SGD(cpu.parameters(), lr=LR, momentum=0.9, weight_decay=WD)
    _cpu_steps(cpu, sgd, 1)
    # PopART's velocity is the velocity scaling (the loss scaling here) times torch's.
    state = {f"Accl1___{n}": sgd.state[p]["momentum_buffer"] * LS for n, p in cpu.named_parameters()}
    make = lambda p: poptorch.optim.SGD(p, lr=LR, momentum=0.9, weight_decay=WD, loss_scaling=LS)  # noqa: E731
    ipu = _resume_on_ipu(train, make, cpu, state)
    _cpu_steps(cpu, sgd, 1)
    _assert_same_weights(ipu, cpu)


def test_a_written_combined_velocity_holds_the_next_steps_weight_decay(train: Any) -> None:
    cpu = Net()
    sgd = torch.optim.SGD(cpu.parameters(), lr=LR, momentum=0.9, weight_decay=WD)
    _cpu_steps(cpu, sgd, 1)
    # Accl = vs * (mm * v + (1 - dm) * wd * w) between steps (popart sgd.hpp:241-257).
    state = {
        f"Accl___{n}": 2.0 * (0.9 * sgd.state[p]["momentum_buffer"] + WD * p.detach())
        for n, p in cpu.named_parameters()
    }
    make = lambda p: poptorch.optim.SGD(  # noqa: E731
        p, lr=LR, momentum=0.9, weight_decay=WD, velocity_scaling=2.0, use_combined_accum=True
    )
    ipu = _resume_on_ipu(train, make, cpu, state)
    _cpu_steps(cpu, sgd, 1)
    _assert_same_weights(ipu, cpu)


def test_a_written_rmsprop_state_is_where_the_update_continues(train: Any) -> None:
    cpu = Net()
    rmsprop = torch.optim.RMSprop(cpu.parameters(), lr=LR, momentum=0.5, centered=True)
    _cpu_steps(cpu, rmsprop, 1)
    state = {}
    for name, param in cpu.named_parameters():
        state.update(
            {
                f"Accl1___{name}": rmsprop.state[param]["square_avg"].clone(),
                f"Accl2___{name}": rmsprop.state[param]["grad_avg"].clone(),
                f"Accl3___{name}": rmsprop.state[param]["momentum_buffer"].clone(),
            }
        )
    make = lambda p: poptorch.optim.RMSprop(p, lr=LR, momentum=0.5, centered=True)  # noqa: E731
    ipu = _resume_on_ipu(train, make, cpu, state)
    _cpu_steps(cpu, rmsprop, 1)
    _assert_same_weights(ipu, cpu)


def test_a_written_input_is_read_back_but_not_used(train: Any) -> None:
    # PopART streams its optimizer inputs only from the optimizer's values (popx/devicex.cpp:855-862, 1585-1590).
    executor, optimizer, ipu = train(lambda p: poptorch.optim.SGD(p, lr=LR))
    saved = optimizer.state_dict()
    name = "scaledLearningRate0___specific___lin.weight"
    optimizer.load_state_dict({**saved, "ipu_param": {**saved["ipu_param"], name: torch.tensor(100.0)}})
    executor(INPUT)
    assert float(optimizer.state_dict()["ipu_param"][name]) == 100.0
    cpu = Net()
    _cpu_steps(cpu, torch.optim.SGD(cpu.parameters(), lr=LR), 1)
    _assert_same_weights(ipu, cpu)
    # An optimizer update refills the inputs from the optimizer (session.cpp:1007-1023).
    for group in optimizer.param_groups:
        group["lr"] = 0.01
    executor.setOptimizer(optimizer)
    assert float(optimizer.state_dict()["ipu_param"][name]) == pytest.approx(0.01)


@pytest.mark.parametrize("kind", [poptorch.optim.SGD, poptorch.optim.RMSprop], ids=lambda k: k.__name__)
def test_a_variable_momentum_of_zero_keeps_a_velocity_without_changing_the_update(train: Any, kind: Any) -> None:
    executor, optimizer, ipu = train(lambda p: kind(p, lr=LR, momentum=0.0))
    velocity = "Accl1" if kind is poptorch.optim.SGD else "Accl3"
    before = optimizer.state_dict()["ipu_state"][f"{velocity}___lin.weight"]
    executor(INPUT)
    assert not torch.equal(optimizer.state_dict()["ipu_state"][f"{velocity}___lin.weight"], before)
    cpu = Net()
    torch_kind = torch.optim.SGD if kind is poptorch.optim.SGD else torch.optim.RMSprop
    _cpu_steps(cpu, torch_kind(cpu.parameters(), lr=LR), 1)
    _assert_same_weights(ipu, cpu)


def test_an_offline_compilation_reads_no_state(train: Any) -> None:
    # poptorch's test_read_ipu_state_offline.
    options = poptorch.Options().useOfflineIpuTarget()
    _, optimizer, _ = train(lambda p: poptorch.optim.SGD(p, lr=0.0), options)
    assert optimizer.state_dict()["ipu_state"] is None
    assert optimizer.state_dict()["ipu_param"] is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: {**s, "ipu_state": [1.0]}, r"ipu_state must be a dict of tensors by name, got list"),
        (lambda s: {**s, "ipu_param": (0.1,)}, r"ipu_param must be a dict of tensors by name, got tuple"),
        (
            lambda s: {**s, "ipu_state": {**s["ipu_state"], "Accl1___lin.weight": torch.zeros(3)}},
            r"ipu_state\['Accl1___lin.weight'\] has shape \(3,\), but the compiled model's Accl1___lin.weight has "
            r"shape \(2, 3\)",
        ),
        (
            lambda s: {**s, "ipu_param": {**s["ipu_param"], "learningRate___specific___lin.bias": 0.1}},
            r"ipu_param\['learningRate___specific___lin.bias'\] must be a torch.Tensor, got float",
        ),
    ],
    ids=["state-not-a-dict", "param-not-a-dict", "wrong-shape", "not-a-tensor"],
)
def test_a_bad_state_is_refused_by_name(train: Any, change: Callable[[dict[str, Any]], Any], message: str) -> None:
    executor, optimizer, _ = train(lambda p: poptorch.optim.Adam(p, lr=LR))
    state = optimizer.state_dict()
    optimizer.load_state_dict(change(state))
    with pytest.raises(poptorch.Error, match=message):
        executor(INPUT)
