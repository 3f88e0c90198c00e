"""Where the emulator used to differ from poptorch 3.4: modes, reassigned buffers, output types, batch samplers,
explicit stages."""

from __future__ import annotations

from typing import Callable

import poptorch
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import BatchSampler, SequentialSampler, TensorDataset

pytestmark = pytest.mark.emulator_only


class FrozenNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(3)
        self.fc = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.fc(self.norm(x)), y)


def test_a_batchnorm_frozen_with_eval_keeps_its_statistics_in_training() -> None:
    model = FrozenNorm()
    model.norm.eval()  # fine-tuning with frozen statistics: poptorch never calls train() on it
    executor = poptorch.trainingModel(model, poptorch.Options(), torch.optim.SGD(model.parameters(), lr=0.1))
    executor(torch.randn(8, 3) * 5 + 3, torch.zeros(8, 1))
    torch.testing.assert_close(model.norm.running_mean, torch.zeros(3))
    torch.testing.assert_close(model.norm.running_var, torch.ones(3))
    assert not model.norm.training
    executor.destroy()


def test_a_buffer_reassigned_in_forward_is_refused_as_poptorch_does() -> None:
    class Counter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.count = self.count + 1
            return x * 2

    executor = poptorch.inferenceModel(Counter())
    with pytest.raises(poptorch.Error, match=r"Buffer count is reassigned within the model .* self\.count\.copy_"):
        executor(torch.ones(2, 1))


def test_integer_and_double_outputs_come_back_as_int32_and_float32() -> None:
    class Classify(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x.argmax(dim=-1), x.double().sum(dim=-1)

    labels, sums = poptorch.inferenceModel(Classify())(torch.tensor([[0.0, 2.0], [3.0, 1.0]]))
    assert labels.dtype == torch.int32 and labels.tolist() == [1, 0]
    assert sums.dtype == torch.float32 and sums.tolist() == [2.0, 4.0]


def test_a_batch_sampler_loader_has_torchs_length_and_combined_batches() -> None:
    data = TensorDataset(torch.arange(32.0))
    sampler = BatchSampler(SequentialSampler(data), batch_size=2, drop_last=False)
    loader = poptorch.DataLoader(poptorch.Options().deviceIterations(4), data, batch_sampler=sampler)
    # poptorch's len() is torch's (the sampler's 16 batches); iterating gives 4 host batches of 4 x 2 samples.
    assert len(loader) == 16
    batches = [batch[0] for batch in loader]
    assert [b.tolist() for b in batches[:1]] == [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]]
    assert len(batches) == 4


class FourBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name, layer in zip("ABCD", self.layers):
            with poptorch.Block(name):  # no ipu_id: the execution strategy places the blocks
                x = layer(x)
        return x


def test_explicit_stages_place_blocks_without_an_ipu(emulated_ipus: Callable[[int], None]) -> None:
    emulated_ipus(2)
    strategy = poptorch.PipelinedExecution(poptorch.Stage("A", "B").ipu(0), poptorch.Stage("C", "D").ipu(1))
    opts = poptorch.Options().deviceIterations(2).setExecutionStrategy(strategy)
    model = FourBlocks()
    out = poptorch.inferenceModel(model, opts)(torch.ones(4, 2))
    torch.testing.assert_close(out, model(torch.ones(4, 2)))
    # Named stages without IPUs run on the IPU numbered like the stage: four stages need four IPUs.
    four = poptorch.Options().deviceIterations(4).setExecutionStrategy(poptorch.PipelinedExecution("A", "B", "C", "D"))
    with pytest.raises(poptorch.Error, match=r"Failed to acquire 4 IPU"):
        poptorch.inferenceModel(FourBlocks(), four)(torch.ones(8, 2))


def test_a_block_no_explicit_stage_names_is_refused() -> None:
    opts = poptorch.Options().deviceIterations(2).setExecutionStrategy(poptorch.PipelinedExecution("A", "B", "C"))
    with pytest.raises(AssertionError, match=r"Unknown Block 'D' list of expected Blocks: \['A', 'B', 'C'\]"):
        poptorch.inferenceModel(FourBlocks(), opts)(torch.ones(4, 2))


def test_each_replica_keeps_its_own_batchnorm_statistics_and_the_host_reads_replica_0s() -> None:
    model = FrozenNorm()  # in train mode: the statistics move
    # BatchNorm writes its buffers in place, which replicas accept only without buffer broadcasting (InplaceOps.cpp).
    opts = poptorch.Options().replicationFactor(2).broadcastBuffers(False)
    executor = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.0))
    x = torch.cat([torch.full((4, 3), 1.0), torch.full((4, 3), 5.0)])  # replica 0 gets the ones, replica 1 the fives
    executor(x, torch.zeros(8, 1))
    # BatchNorm's momentum 0.1 from zero: replica 0's running mean is 0.1 x 1; replica 1 never touches it.
    torch.testing.assert_close(model.norm.running_mean, torch.full((3,), 0.1))
    executor.destroy()


def test_dataloader_arguments_as_poptorch_takes_them() -> None:
    data = TensorDataset(torch.arange(4.0))
    # batch_size=None is unbatched in poptorch (__init__.py:319-321): one sample per item.
    assert [item[0].dim() for item in poptorch.DataLoader(poptorch.Options(), data, batch_size=None)] == [0, 0, 0, 0]
    with pytest.raises(AssertionError, match=r"poptorch\.Options"):
        poptorch.DataLoader(None, data)  # type: ignore[arg-type]
