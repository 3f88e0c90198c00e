"""The emulator's ``poptorch.optim`` and ``setOptimizer`` keep poptorch 3.4's and PopART's rules."""

from __future__ import annotations

import copy
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.emulator_only


class Regression(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(3, 1)
        self.head = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.fc(x) + self.head(x), y)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(4, 3, generator=generator), torch.randn(4, 1, generator=generator)


def test_explicit_hyper_parameters_are_variable_and_the_others_constant(poptorch: ModuleType) -> None:
    optimizer = poptorch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1, momentum=0.9)
    assert not optimizer.variable_attrs.isConstant("lr")
    assert not optimizer.variable_attrs.isConstant("momentum")
    assert optimizer.variable_attrs.isConstant("weight_decay")
    with pytest.raises(AssertionError, match="Unknown attribute betas"):
        optimizer.variable_attrs.markAsVariable("betas")


def test_a_changed_constant_is_refused_with_poparts_error(poptorch: ModuleType) -> None:
    model = Regression()
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1)
    executor = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    executor(*_data())
    optimizer.param_groups[0]["weight_decay"] = 0.1
    with pytest.raises(poptorch.Error, match=r"Values are constant but do not match\."):
        executor.setOptimizer(optimizer)
    # Before compilation every value may still change.
    executor.destroy()
    fresh = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    fresh.setOptimizer(optimizer)
    fresh.destroy()


def test_a_zero_momentum_of_a_torch_optimizer_is_a_constant(poptorch: ModuleType) -> None:
    model = Regression()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    executor = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    executor(*_data())
    optimizer.param_groups[0]["momentum"] = 0.5
    with pytest.raises(poptorch.Error, match="Can not replace a constant value with a non constant value"):
        executor.setOptimizer(optimizer)
    executor.destroy()


def test_a_variable_momentum_follows_its_schedule_on_the_device(poptorch: ModuleType) -> None:
    model = Regression()
    reference = copy.deepcopy(model)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    executor = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    torch_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    x, y = _data()
    for momentum in (0.9, 0.5, 0.1):
        optimizer.param_groups[0]["momentum"] = momentum
        executor.setOptimizer(optimizer)
        executor(x, y)
        torch_optimizer.param_groups[0]["momentum"] = momentum
        torch_optimizer.zero_grad()
        reference(x, y).backward()
        torch_optimizer.step()
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want)
    executor.destroy()


def test_betas_that_are_not_a_tuple_assert_when_the_model_is_wrapped(poptorch: ModuleType) -> None:
    model = Regression()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    optimizer.param_groups[0]["betas"] = [0.9, 0.99]
    with pytest.raises(AssertionError, match=r"Expected a pair for betas but got \[0\.9, 0\.99\] instead"):
        poptorch.trainingModel(model, poptorch.Options(), optimizer)


def test_weights_outside_the_optimizer_train_with_its_defaults(poptorch: ModuleType) -> None:
    model = Regression()
    reference = copy.deepcopy(model)
    # Only fc in the group (lr 0.1); the defaults (lr 0.5) apply to head, which PopART updates too.
    optimizer = torch.optim.SGD([{"params": model.fc.parameters(), "lr": 0.1}], lr=0.5)
    executor = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    x, y = _data()
    executor(x, y)
    torch.optim.SGD(
        [{"params": reference.fc.parameters(), "lr": 0.1}, {"params": reference.head.parameters(), "lr": 0.5}]
    ).zero_grad()
    reference(x, y).backward()
    with torch.no_grad():
        for param in reference.fc.parameters():
            param -= 0.1 * param.grad
        for param in reference.head.parameters():
            param -= 0.5 * param.grad
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want)
    executor.destroy()


def test_lamb_takes_one_trust_scaled_step(poptorch: ModuleType) -> None:
    layer = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[3.0, 4.0]]))  # |w| = 5

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return poptorch.identity_loss(self.layer(x), reduction="sum")

    optimizer = poptorch.optim.LAMB(layer.parameters(), lr=0.1, weight_decay=0.0, eps=0.0)
    executor = poptorch.trainingModel(Net(), poptorch.Options(), optimizer)
    executor(torch.tensor([[1.0, -2.0]]))
    # First step with bias correction: the update is g / |g| per element = sign(g) = (1, -1), |update| = sqrt(2);
    # the trust ratio is |w| / |update| = 5 / sqrt(2), so w moves by 0.1 * 5 / sqrt(2) * (1, -1).
    moved = 0.1 * 5 / 2**0.5
    torch.testing.assert_close(layer.weight.detach(), torch.tensor([[3.0 - moved, 4.0 + moved]]))
    assert sorted(optimizer.state_dict()["ipu_state"]) == [
        "Accl1___layer.weight",
        "Accl2___layer.weight",
        "Step___layer.weight",
    ]
    executor.destroy()


@pytest.mark.parametrize(
    ("make", "prefixes"),
    [
        (lambda p, poptorch: poptorch.optim.SGD(p, lr=0.1, momentum=0.9), {"Accl1"}),
        (lambda p, poptorch: poptorch.optim.SGD(p, lr=0.1, momentum=0.9, use_combined_accum=True), {"Accl"}),
        (lambda p, poptorch: poptorch.optim.Adam(p, lr=0.1), {"Accl1", "Accl2", "Step"}),
        (
            lambda p, poptorch: poptorch.optim.RMSprop(p, lr=0.1, momentum=0.9, centered=True),
            {"Accl1", "Accl2", "Accl3"},
        ),
    ],
    ids=["SGD", "SGD-combined", "Adam", "RMSprop-centered"],
)
def test_optimizer_state_has_poparts_tensor_names(poptorch: ModuleType, make: object, prefixes: set[str]) -> None:
    model = Regression()
    optimizer = make(model.parameters(), poptorch)  # type: ignore[operator]
    executor = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    executor(*_data())
    names = set(optimizer.state_dict()["ipu_state"])
    weights = {name for name, _ in model.named_parameters()}
    assert names == {f"{prefix}___{weight}" for prefix in prefixes for weight in weights}
    executor.destroy()


def test_a_float16_accumulator_switches_the_mean_reduction_to_running(poptorch: ModuleType) -> None:
    model = Regression()
    optimizer = poptorch.optim.Adam(model.parameters(), lr=0.1, accum_type=torch.float16)
    executor = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    strategy = executor.options.Training.meanAccumulationAndReplicationReductionStrategy
    assert strategy == poptorch.MeanReductionStrategy.Running
    executor.destroy()


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_rmsprop_tensorflow_variant_is_what_the_device_computes(poptorch: ModuleType, momentum: float) -> None:
    layer = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        layer.weight.fill_(1.0)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return poptorch.identity_loss(self.layer(x), reduction="sum")

    optimizer = poptorch.optim.RMSprop(
        layer.parameters(), lr=0.1, alpha=0.5, eps=0.0, momentum=momentum, use_tf_variant=True
    )
    executor = poptorch.trainingModel(Net(), poptorch.Options(), optimizer)
    executor(torch.tensor([[2.0]]))  # gradient 2
    # TensorFlow's variant: the squared average starts at 1, so 0.5 x 1 + 0.5 x 4 = 2.5; the step is lr x 2 / sqrt(2.5)
    # (the momentum buffer starts at 0, so its first value is that step). PyTorch's would be lr x 2 / sqrt(2).
    torch.testing.assert_close(layer.weight.detach(), torch.tensor([[1.0 - 0.1 * 2 / 2.5**0.5]]))
    executor.destroy()


@pytest.mark.parametrize("automatic", [False, True])
def test_automatic_loss_scaling_makes_the_loss_scale_variable(poptorch: ModuleType, automatic: bool) -> None:
    model = Regression()
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1)  # loss_scaling not passed: a constant 1.0
    opts = poptorch.Options()
    opts.Training.setAutomaticLossScaling(automatic)
    executor = poptorch.trainingModel(model, opts, optimizer)
    executor(*_data())
    optimizer.loss_scaling = 128.0
    if automatic:
        # poptorch marks the loss scale variable when the IPU adapts it (_optimizer_attributes.py:155-159).
        executor.setOptimizer(optimizer)
        assert not optimizer.variable_attrs.isConstant("loss_scaling")
    else:
        with pytest.raises(poptorch.Error, match=r"Values are constant but do not match\."):
            executor.setOptimizer(optimizer)
    executor.destroy()
