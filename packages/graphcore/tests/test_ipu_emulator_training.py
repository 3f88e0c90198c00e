"""The emulated executors do what poptorch does: batch layout, weight updates, reductions and output modes."""

from __future__ import annotations

import copy
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from lightning_accel.core.pycompat import strict_zip


class Regression(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.fc(x)
        return out, F.mse_loss(out, y)


def _data(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(rows, 3, generator=generator), torch.randn(rows, 2, generator=generator)


def _reference(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, di: int, ga: int, rf: int, lr: float, mean: bool
) -> None:
    """Plain PyTorch: the [di][ga][rf] layout, one SGD update per device iteration."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    micro = x.shape[0] // (di * ga * rf)
    xs, ys = x.reshape(di, ga, rf, micro, 3), y.reshape(di, ga, rf, micro, 2)
    for d in range(di):
        opt.zero_grad()
        total = sum(F.mse_loss(model.fc(xs[d, a, r]), ys[d, a, r]) for a in range(ga) for r in range(rf))
        (total / (ga * rf) if mean else total).backward()
        opt.step()


@pytest.mark.parametrize("reduction", ["Mean", "Sum"])
def test_one_host_call_does_one_update_per_device_iteration(poptorch: ModuleType, reduction: str) -> None:
    model = Regression()
    reference = copy.deepcopy(model)
    single_update = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(4).replicationFactor(2)
    opts.Training.gradientAccumulation(2)
    opts.Training.accumulationAndReplicationReductionType(getattr(poptorch.ReductionType, reduction))
    executor = poptorch.trainingModel(model, opts, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = _data(4 * 2 * 2 * 3)

    executor(x, y)

    # The emulator's weights after one host call equal 4 plain-PyTorch updates over the same [di][ga][rf] layout.
    _reference(reference, x, y, di=4, ga=2, rf=2, lr=0.1, mean=reduction == "Mean")
    for got, want in strict_zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want)
    # One update for the whole host call (the same 16 micro-batches) lands elsewhere, so the comparison above is
    # sensitive to the number of updates.
    _reference(single_update, x, y, di=1, ga=4 * 2, rf=2, lr=0.1, mean=reduction == "Mean")
    assert not torch.allclose(single_update.fc.weight, model.fc.weight)
    executor.destroy()


def test_optimizer_state_counts_the_device_updates(poptorch: ModuleType) -> None:
    model = Regression()
    optimizer = poptorch.optim.Adam(model.parameters(), lr=0.01)
    opts = poptorch.Options().deviceIterations(4).replicationFactor(2)
    opts.Training.gradientAccumulation(2)
    executor = poptorch.trainingModel(model, opts, optimizer)
    executor(*_data(48))
    executor(*_data(48))
    # poptorch's format: the state lives on the device and comes back as ipu_state, by parameter name.
    state = optimizer.state_dict()
    assert state["ipu_state"]["Step___fc.weight"].item() == 8
    assert state["ipu_state"]["Accl2___fc.weight"].abs().sum() > 0
    assert state["state"] == {}
    executor.destroy()


def test_an_optimizer_state_without_ipu_keys_is_refused(poptorch: ModuleType) -> None:
    model = Regression()
    host_state = torch.optim.Adam(model.parameters()).state_dict()
    optimizer = poptorch.optim.Adam(model.parameters(), lr=0.01)
    with pytest.raises(RuntimeError, match=r"^Only IPU optimizer states can be loaded onto the IPU\.$"):
        optimizer.load_state_dict(host_state)


def test_accumulation_mean_matches_a_single_larger_batch(poptorch: ModuleType) -> None:
    x, y = _data(8)
    accumulated, single = Regression(), Regression()
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    poptorch.trainingModel(accumulated, opts)(x, y)
    poptorch.trainingModel(single, poptorch.Options())(x, y)
    # Each training wrapper gives its model's parameters a class of its own, as poptorch does: compare values.
    for a, b in zip(accumulated.parameters(), single.parameters()):
        torch.testing.assert_close(a.detach(), b.detach())


@pytest.mark.parametrize(
    ("mode", "period", "loss_shape", "out_shape"),
    [
        ("Default", None, (2,), (2 * 5, 2)),  # Final: the last micro-batch of each replica
        ("Final", None, (2,), (2 * 5, 2)),
        ("All", None, (16,), (16 * 5, 2)),
        ("Sum", None, (2,), (2 * 5, 2)),
        ("EveryN", 2, (8,), (8 * 5, 2)),
    ],
)
def test_training_output_modes(
    poptorch: ModuleType, mode: str, period: int | None, loss_shape: tuple[int, ...], out_shape: tuple[int, ...]
) -> None:
    opts = poptorch.Options().deviceIterations(4).replicationFactor(2)
    opts.Training.gradientAccumulation(2)
    if mode != "Default":
        opts.outputMode(getattr(poptorch.OutputMode, mode), period)
    executor = poptorch.trainingModel(Regression(), opts)
    out, loss = executor(*_data(16 * 5))
    assert tuple(loss.shape) == loss_shape
    assert tuple(out.shape) == out_shape
    executor.destroy()


def test_final_loss_with_one_replica_is_a_scalar(poptorch: ModuleType) -> None:
    executor = poptorch.trainingModel(Regression(), poptorch.Options().deviceIterations(3))
    _, loss = executor(*_data(6))
    assert loss.shape == torch.Size([])
    executor.destroy()


def test_sum_output_is_the_per_replica_sum(poptorch: ModuleType) -> None:
    model = torch.nn.Identity()
    opts = poptorch.Options().deviceIterations(3).replicationFactor(2).outputMode(poptorch.OutputMode.Sum)
    executor = poptorch.inferenceModel(model, opts)
    x = torch.arange(6.0).reshape(6, 1)  # micro-batches [d][r]: replica 0 gets 0, 2, 4; replica 1 gets 1, 3, 5
    assert executor(x).flatten().tolist() == [6.0, 9.0]
    executor.destroy()


def test_inference_all_keeps_the_input_order(poptorch: ModuleType) -> None:
    opts = poptorch.Options().deviceIterations(2).replicationFactor(2)
    executor = poptorch.inferenceModel(torch.nn.Identity(), opts)
    x = torch.arange(8.0).reshape(8, 1)
    assert torch.equal(executor(x), x)
    executor.destroy()


def test_every_n_returns_every_nth_device_iteration(poptorch: ModuleType) -> None:
    opts = poptorch.Options().deviceIterations(10).outputMode(poptorch.OutputMode.EveryN, 5)
    executor = poptorch.inferenceModel(torch.nn.Identity(), opts)
    assert executor(torch.arange(10.0).reshape(10, 1)).flatten().tolist() == [4.0, 9.0]
    executor.destroy()


def test_set_optimizer_changes_the_learning_rate_on_the_device(poptorch: ModuleType) -> None:
    x, y = _data(4)
    frozen_model = Regression()
    optimizer = torch.optim.SGD(frozen_model.parameters(), lr=0.1)
    executor = poptorch.trainingModel(frozen_model, poptorch.Options(), optimizer)
    executor(x, y)
    before = frozen_model.fc.weight.detach().clone()
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    executor.setOptimizer(optimizer)
    executor(x, y)
    torch.testing.assert_close(frozen_model.fc.weight, before)
    executor.destroy()


def test_clipping_by_norm_on_the_device(poptorch: ModuleType) -> None:
    x, y = _data(4)
    y = y * 1000  # huge gradients
    clipped, reference = Regression(), Regression()
    executor = poptorch.trainingModel(
        clipped, poptorch.Options(), poptorch.optim.SGD(clipped.parameters(), lr=1.0, max_grad_norm=0.5)
    )
    executor(x, y)
    before = [p.detach().clone() for p in reference.parameters()]
    step = torch.cat([(a - b).flatten() for a, b in zip(clipped.parameters(), before)])
    torch.testing.assert_close(step.norm(), torch.tensor(0.5))
    executor.destroy()


def test_training_updates_reach_an_inference_model_of_the_same_model(poptorch: ModuleType) -> None:
    model = Regression()
    x, y = _data(4)
    training = poptorch.trainingModel(model, poptorch.Options())
    training(x, y)
    inference = poptorch.inferenceModel(model, poptorch.Options())
    before, _ = inference(x, y)
    training(x, y)
    after, _ = inference(x, y)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, model.fc(x).detach())
    training.destroy()
    inference.destroy()


def test_identity_loss_marks_a_hand_written_loss(poptorch: ModuleType) -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return poptorch.identity_loss((self.fc(x) ** 2).sum(dim=1), reduction="mean")

    net = Net()
    before = net.fc.weight.detach().clone()
    poptorch.trainingModel(net)(torch.ones(4, 2))
    assert not torch.equal(before, net.fc.weight)


def test_a_model_without_loss_cannot_train(poptorch: ModuleType) -> None:
    executor = poptorch.trainingModel(torch.nn.Linear(2, 1))
    with pytest.raises(poptorch.Error, match="Couldn't find a loss in graph!"):
        executor(torch.ones(2, 2))


def test_two_independent_losses_are_refused(poptorch: ModuleType) -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.fc(x)
            return F.mse_loss(out, torch.zeros_like(out)) + F.l1_loss(out, torch.zeros_like(out))

    with pytest.raises(poptorch.Error, match="Multiple independent losses found in graph"):
        poptorch.trainingModel(Net())(torch.ones(2, 2))


def test_wrapping_the_same_model_twice_for_training_is_refused(poptorch: ModuleType) -> None:
    model = Regression()
    first = poptorch.trainingModel(model)
    with pytest.raises(RuntimeError, match=r"already been wrapped in 'poptorch\.trainingModel'"):
        poptorch.trainingModel(model)
    first(*_data(2))
    first.destroy()
    second = poptorch.trainingModel(model)
    second(*_data(2))
    second.destroy()
    assert poptorch.inferenceModel(model)(*_data(2))[0].shape == (2, 2)


def test_float32_model_accepts_float16_inputs(poptorch: ModuleType) -> None:
    executor = poptorch.inferenceModel(torch.nn.Linear(3, 2))
    assert executor(torch.ones(2, 3, dtype=torch.float16)).dtype == torch.float32
    executor.destroy()
