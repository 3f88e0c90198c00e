"""The emulator fails where poptorch fails, with poptorch's words."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F


def test_batch_not_divisible_by_the_combined_factor(poptorch: ModuleType) -> None:
    opts = poptorch.Options().deviceIterations(4).replicationFactor(2)
    executor = poptorch.inferenceModel(torch.nn.Identity(), opts)
    with pytest.raises(AssertionError) as info:  # poptorch asserts (_poplar_executor.py:1521)
        executor(torch.ones(12, 3))
    assert (
        "Invalid batch dimension: In the input torch.Size([12, 3]), the batch dimension (12) must be a multiple of "
        "Options.deviceIterations(4) * (Options.replicationFactor(2) / "
        "Options.inputReplicaGrouping.input_group_size(1)) * Options.Training.gradientAccumulation(1) = 8"
    ) in str(info.value)


def test_later_calls_must_match_the_compiled_inputs(poptorch: ModuleType) -> None:
    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor, factor: int) -> torch.Tensor:
            return x * factor

    executor = poptorch.inferenceModel(Scale())
    executor(torch.ones(2, 3), 2)
    with pytest.raises(poptorch.Error, match=r"Shape mismatch for x: expected torch.Size\(\[2, 3\]\) but got"):
        executor(torch.ones(2, 4), 2)
    with pytest.raises(poptorch.Error, match="Value mismatch for factor: expected 2 but got 3"):
        executor(torch.ones(2, 3), 3)
    with pytest.raises(poptorch.Error, match="Data type mismatch for x"):
        executor(torch.ones(2, 3, dtype=torch.float64), 2)
    executor.destroy()


def test_inference_with_gradient_accumulation_is_refused(poptorch: ModuleType) -> None:
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    with pytest.raises(poptorch.Error, match=r"gradientAccumulation to 1 or leave it as its default value \(1\)"):
        poptorch.inferenceModel(torch.nn.Identity(), opts)


class FourIPUs(torch.nn.Module):
    """The seed's BeginBlock model: layer1 | layer2+layer3 | layer4 | softmax on IPUs 0..3."""

    def __init__(self, poptorch: ModuleType, ipus: tuple[int, ...] = (0, 1, 2, 3)) -> None:
        super().__init__()
        self.layer1 = poptorch.BeginBlock(torch.nn.Linear(5, 10), ipu_id=ipus[0])
        self.layer2 = poptorch.BeginBlock(torch.nn.Linear(10, 5), ipu_id=ipus[1])
        self.layer3 = torch.nn.Linear(5, 5)
        self.layer4 = poptorch.BeginBlock(torch.nn.Linear(5, 5), ipu_id=ipus[2])
        self.softmax = poptorch.BeginBlock(torch.nn.Softmax(dim=1), ipu_id=ipus[3])

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        out = self.softmax(self.layer4(self.layer3(self.layer2(self.layer1(x)))))
        return out if y is None else F.cross_entropy(out, y)


def test_pipelined_inference_needs_device_iterations_per_stage(poptorch: ModuleType) -> None:
    executor = poptorch.inferenceModel(FourIPUs(poptorch), poptorch.Options().deviceIterations(2))
    with pytest.raises(poptorch.Error) as info:
        executor(torch.ones(2, 5))
    assert str(info.value).endswith(
        "poptorch.Options().deviceIterations must be greater than or equal to the number of pipeline stages (4) "
        "when using PopTorch.PipelinedExecution."
    )
    ok = poptorch.inferenceModel(FourIPUs(poptorch), poptorch.Options().deviceIterations(4))
    assert ok(torch.ones(4, 5)).shape == (4, 5)
    ok.destroy()


def test_pipelined_training_needs_accumulation_per_stage(poptorch: ModuleType) -> None:
    opts = poptorch.Options().deviceIterations(20)
    executor = poptorch.trainingModel(FourIPUs(poptorch), opts)
    with pytest.raises(poptorch.Error) as info:
        executor(torch.ones(20, 5), torch.zeros(20, dtype=torch.long))
    assert (
        "poptorch.Options().Training.gradientAccumulation must be greater than or equal to the number of pipeline "
        "stages (7) when using poptorch.PipelinedExecution. Please note that a model with 4 pipeline stages in "
        "PopTorch will have an additional 3 stages when training."
    ) in str(info.value)


def test_sharded_execution_has_no_stage_requirement(poptorch: ModuleType) -> None:
    opts = poptorch.Options().setExecutionStrategy(poptorch.ShardedExecution())
    executor = poptorch.trainingModel(FourIPUs(poptorch), opts)
    executor(torch.ones(1, 5), torch.zeros(1, dtype=torch.long))
    executor.destroy()


def test_non_power_of_two_ipu_count(poptorch: ModuleType, caplog: pytest.LogCaptureFixture) -> None:
    executor = poptorch.inferenceModel(FourIPUs(poptorch, (0, 1, 2, 2)), poptorch.Options().deviceIterations(3))
    with pytest.raises(poptorch.Error) as info:
        executor(torch.ones(3, 5))
    assert (
        "The model specifies the use of 3 IPUs, however PopTorch must reserve a minimum of 4 in order to allow the "
        "model to run, because PopTorch must reserve a power of 2 or maximum of 64 IPUs per process. Please "
        "reconfigure your model to use a different number of IPUs or set poptorch.Options().autoRoundNumIPUs(True)."
    ) in str(info.value)
    rounded = poptorch.inferenceModel(
        FourIPUs(poptorch, (0, 1, 2, 2)), poptorch.Options().deviceIterations(3).autoRoundNumIPUs(True)
    )
    with caplog.at_level(logging.WARNING, logger="poptorch"):
        rounded(torch.ones(3, 5))
    assert "Reserving 4 IPUs when the model specifices the use of only 3" in caplog.text
    rounded.destroy()


def test_more_ipus_than_the_system_has(poptorch: ModuleType) -> None:
    opts = poptorch.Options().deviceIterations(4).replicationFactor(4)
    executor = poptorch.inferenceModel(FourIPUs(poptorch), opts)
    with pytest.raises(poptorch.Error, match=r"Failed to acquire 16 IPU\(s\)\nNo device found on the system with 16"):
        executor(torch.ones(16, 5))


def test_more_than_64_ipus(poptorch: ModuleType, emulated_ipus: Callable[[int], None]) -> None:
    emulated_ipus(256)
    executor = poptorch.inferenceModel(torch.nn.Identity(), poptorch.Options().replicationFactor(128))
    with pytest.raises(poptorch.Error, match=r"Too many IPUs requested \(128\)"):
        executor(torch.ones(128, 1))


def test_attached_models_share_the_system(poptorch: ModuleType) -> None:
    first = poptorch.inferenceModel(torch.nn.Identity(), poptorch.Options().replicationFactor(8))
    first(torch.ones(8, 1))
    second = poptorch.inferenceModel(torch.nn.Identity(), poptorch.Options().replicationFactor(8))
    with pytest.raises(poptorch.Error, match=r"Failed to acquire 8 IPU\(s\)\n8 of the 8 IPUs are attached"):
        second(torch.ones(8, 1))
    first.detachFromDevice()
    assert not first.isAttachedToDevice()
    assert second(torch.ones(8, 1)).shape == (8, 1)
    with pytest.raises(poptorch.Error, match="Device is not attached"):
        first.detachFromDevice()
    second.detachFromDevice()
    first.attachToDevice()
    with pytest.raises(poptorch.Error, match="Device is already attached"):
        first.attachToDevice()
    first.destroy()
    second.destroy()


def test_attach_before_compile(poptorch: ModuleType) -> None:
    executor = poptorch.inferenceModel(torch.nn.Identity())
    assert not executor.isAttachedToDevice()
    with pytest.raises(poptorch.Error, match="has not been compiled"):
        executor.attachToDevice()


def test_block_context_manager_and_function(poptorch: ModuleType) -> None:
    @poptorch.BlockFunction(ipu_id=1)
    def head(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with poptorch.Block(ipu_id=0):
                x = x + 1
            return head(x)

    executor = poptorch.inferenceModel(Net(), poptorch.Options().deviceIterations(2))
    assert executor(torch.zeros(2, 1)).flatten().tolist() == [2.0, 2.0]
    assert executor._executable.num_ipus == 2
    executor.destroy()


def test_a_module_goes_into_one_block_only(poptorch: ModuleType) -> None:
    layer = poptorch.BeginBlock(torch.nn.Linear(1, 1), ipu_id=0)
    with pytest.raises(poptorch.Error, match="already been assigned to a block"):
        poptorch.BeginBlock(layer, ipu_id=1)


def test_set_optimizer_refuses_unsupported_types(poptorch: ModuleType) -> None:
    model = torch.nn.Linear(1, 1)
    # An assert in poptorch 3.4 (_optimizer_attributes.py:23-26).
    with pytest.raises(AssertionError, match=r"Unsupported optimizer type\. Types supported _OptimizerType\.SGD1"):
        poptorch.trainingModel(model, optimizer=torch.optim.Adagrad(model.parameters()))


def test_hardware_probe_reports_the_emulated_system(poptorch: ModuleType, emulated_ipus: Callable[[int], None]) -> None:
    emulated_ipus(4)
    assert poptorch.ipuHardwareIsAvailable(4)
    assert not poptorch.ipuHardwareIsAvailable(8)
    assert poptorch.ipuHardwareVersion() == 2


def test_dataloader_combines_the_batches(poptorch: ModuleType) -> None:
    opts = poptorch.Options().deviceIterations(4).replicationFactor(2)
    opts.Training.gradientAccumulation(2)
    loader = poptorch.DataLoader(opts, torch.utils.data.TensorDataset(torch.arange(100.0)), batch_size=3)
    assert loader.combinedBatchSize == 48
    assert [batch[0].shape[0] for batch in loader] == [48, 48]  # drop_last by default
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(10)), 2, drop_last=False)
    combined = poptorch.DataLoader(
        poptorch.Options().deviceIterations(2),
        torch.utils.data.TensorDataset(torch.arange(10.0)),
        batch_sampler=sampler,
    )
    assert [batch[0].tolist() for batch in combined] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_seam_without_emulation_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_accel.core.emulation import reset_emulation_settings
    from lightning_accel.core.errors import DeviceUnavailableError
    from lightning_accel.graphcore import sdk

    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "0")
    reset_emulation_settings()
    with pytest.raises(DeviceUnavailableError, match=r"poptorch, which is not installed.*LIGHTNING_ACCEL_EMULATE=ipu"):
        sdk.poptorch  # noqa: B018


def test_stages_group_blocks(poptorch: ModuleType) -> None:
    class TwoBlocks(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = poptorch.BeginBlock(torch.nn.Linear(2, 2), user_id="a", ipu_id=0)
            self.b = poptorch.BeginBlock(torch.nn.Linear(2, 2), user_id="b", ipu_id=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    # One stage on one IPU: a single device iteration is enough.
    opts = poptorch.Options().setExecutionStrategy(poptorch.PipelinedExecution(poptorch.Stage("a", "b").ipu(0)))
    executor = poptorch.inferenceModel(TwoBlocks(), opts)
    assert executor(torch.ones(1, 2)).shape == (1, 2)
    assert (executor._executable.num_ipus, executor._executable.stages) == (1, 1)
    executor.destroy()
    # poptorch counts a pipeline stage at every change of IPU, whatever the stage grouping (Compiler.cpp:1286-1296):
    # one stage over IPUs 0 and 1 is two pipeline stages.
    grouped = poptorch.Options().setExecutionStrategy(poptorch.PipelinedExecution(poptorch.Stage("a", "b")))
    with pytest.raises(poptorch.Error, match=r"number of pipeline stages \(2\)"):
        poptorch.inferenceModel(TwoBlocks(), grouped)(torch.ones(1, 2))
    with pytest.raises(poptorch.Error, match=r"number of pipeline stages \(2\)"):
        poptorch.inferenceModel(TwoBlocks(), poptorch.Options())(torch.ones(1, 2))
