"""poptorch's execution model: a shallow copy, traced once, then a compiled program; weights move only when copied."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
import torch.nn.functional as F


class Counting(torch.nn.Module):
    """Counts the Python calls of its forward and keeps the last input as an attribute (a Python side effect)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(3, 2)
        self.drop = torch.nn.Dropout(0.5)
        self.calls = 0

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        self.last_input = x
        out = self.fc(self.drop(x))
        return out, F.mse_loss(out, y)


def _data(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 3, generator=generator), torch.randn(rows, 2, generator=generator)


def test_the_forward_python_runs_once_and_the_program_every_call(poptorch: ModuleType) -> None:
    model = Counting()
    executor = poptorch.trainingModel(model, poptorch.Options().deviceIterations(4))
    losses = [executor(*_data(8, seed))[1] for seed in range(3)]
    # 3 calls x 4 device iterations; the Python ran once, on a shallow copy (the attribute it set is not ours).
    assert model.calls == 0
    assert executor._model.calls == 1
    assert not hasattr(model, "last_input")
    assert len({float(loss) for loss in losses}) == 3
    executor.destroy()


def test_dropout_draws_new_masks_on_every_call(poptorch: ModuleType) -> None:
    model = Counting()
    # lr=0: the weights stay put, so only dropout's masks can change the outputs.
    executor = poptorch.trainingModel(model, poptorch.Options(), torch.optim.SGD(model.parameters(), lr=0.0))
    x, y = torch.ones(4, 3), torch.zeros(4, 2)
    first, second = executor(x, y)[0], executor(x, y)[0]
    assert not torch.equal(first, second)
    executor.destroy()


def test_host_weight_edits_reach_an_attached_model_only_when_copied(poptorch: ModuleType) -> None:
    model = Counting().eval()
    executor = poptorch.inferenceModel(model)
    x, y = _data(2, 0)
    before = executor(x, y)[0]
    with torch.no_grad():
        model.fc.weight.zero_()
        model.fc.bias.zero_()
    torch.testing.assert_close(executor(x, y)[0], before)  # the device still holds the old weights
    executor.copyWeightsToDevice()
    torch.testing.assert_close(executor(x, y)[0], torch.zeros(2, 2))
    # The executor's load_state_dict loads the host model and uploads it.
    executor.load_state_dict({"fc.weight": torch.ones(2, 3), "fc.bias": torch.zeros(2)})
    torch.testing.assert_close(executor(x, y)[0], x.sum(dim=1, keepdim=True).expand(2, 2))
    executor.destroy()


def test_an_inference_model_follows_the_training_model_of_the_same_model(poptorch: ModuleType) -> None:
    model = Counting()
    training = poptorch.trainingModel(model, poptorch.Options(), torch.optim.SGD(model.parameters(), lr=0.5))
    inference = poptorch.inferenceModel(model)
    x, y = _data(4, 0)
    # poptorch compiles the modes the modules have at the first call and never sets them itself.
    model.eval()
    before = inference(x, y)[0]
    model.train()
    training(x, y)
    training.detachFromDevice()
    # The training model's copy of the weights to the host is a new version: the inference model uploads it.
    after = inference(x, y)[0]
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, model.eval().fc(x))
    training.destroy()
    inference.destroy()


@pytest.mark.emulator_only
def test_reading_a_value_out_of_a_tensor_while_tracing_is_refused(poptorch: ModuleType) -> None:
    class Branching(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else x

    executor = poptorch.inferenceModel(Branching())
    # poptorch's aten::item error (RegisterAtenOverloads.cpp:508-512): `if tensor:` calls item().
    with pytest.raises(poptorch.Error, match=r"^'poptorch_py_error': aten::item is only supported in eager mode, but"):
        executor(torch.ones(2, 3))


def test_begin_block_without_an_ipu_asserts_as_poptorch_does(poptorch: ModuleType) -> None:
    # AutoStage.SameAsIpu (the default) needs every block to name its IPU (poptorch 3.4 options.py:717-723).
    model = torch.nn.Sequential(poptorch.BeginBlock(torch.nn.Linear(3, 3), user_id="first"))
    executor = poptorch.inferenceModel(model)
    with pytest.raises(
        AssertionError, match=r"^poptorch\.AutoStage\.SameAsIpu was selected but no IPU was specified for block first$"
    ):
        executor(torch.ones(2, 3))


@pytest.mark.parametrize("batch_size", [None, 2])
def test_a_batch_sampler_with_another_batch_size_is_refused_as_poptorch_does(
    poptorch: ModuleType, batch_size: int | None
) -> None:
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(8)), 2, drop_last=False)
    dataset = torch.utils.data.TensorDataset(torch.arange(8.0))
    with pytest.raises(
        poptorch.Error,
        match=r"^'poptorch_py_error': `batch_sampler` option is mutually exclusive with batch_size, shuffle\.$",
    ):
        poptorch.DataLoader(poptorch.Options(), dataset, batch_size=batch_size, batch_sampler=sampler)
