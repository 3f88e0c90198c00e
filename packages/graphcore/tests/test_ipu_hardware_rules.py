"""Issue 30: five things that trained on the emulator and fail on IPUs, now as poptorch 3.4 does them.

Each test first holds the emulator to poptorch's behaviour (its error type and text, from the cited source), then
shows what a Lightning user sees: a run that works as it would on hardware, or a clear refusal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import poptorch
import pytest
import torch
import torch.nn.functional as F
from ipu_models import ClassifierBase, blobs
from lightning.pytorch import Trainer
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.graphcore import IPUStrategy


def _trainer(tmp_path: Path, **kwargs: Any) -> Trainer:
    settings: dict[str, Any] = {
        "accelerator": "ipu",
        "devices": 1,
        "max_epochs": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": tmp_path,
    }
    settings.update(kwargs)
    return Trainer(**settings)


# -- 1. in-place buffer writes with replicas ---------------------------------------------------------------------


class BufferUpdatingModel(torch.nn.Module):
    """poptorch's tests/buffers_test.py:216-235."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 2, 1, padding=0)
        self.register_buffer("test_buff", torch.zeros([2], dtype=torch.float32))
        self.loss = torch.nn.L1Loss()

    def forward(self, inp: torch.Tensor, target: torch.Tensor) -> Any:
        x = self.conv(inp)
        with torch.no_grad():
            self.test_buff += self.conv.bias[0]
        return x, self.loss(x, target)


BROADCAST_ERROR = (
    r"PopTorch does not support broadcasting buffers. If your model is able to tolerate buffers becoming out of sync "
    r"between replicas, you can disable buffer broadcasting using poptorch.Options.broadcastBuffers\(False\)."
)


def test_an_inplace_buffer_write_with_replicas_is_refused_as_poptorch_does() -> None:
    # poptorch's tests/buffers_test.py::test_failing_on_replicas
    model = BufferUpdatingModel()
    opts = poptorch.Options().replicationFactor(2)
    executor = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(poptorch.Error, match=BROADCAST_ERROR):
        executor(torch.ones(4, 2, 2, 2), torch.zeros(4, 2, 2, 2))


def test_batchnorm_with_replicas_needs_broadcast_buffers_off() -> None:
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.mse_loss(self.net(x), y)

    net = Net()
    refused = poptorch.trainingModel(net, poptorch.Options().replicationFactor(2))
    with pytest.raises(poptorch.Error, match=BROADCAST_ERROR):
        refused(torch.randn(8, 3), torch.zeros(8, 1))
    # One replica broadcasts to no one: BatchNorm trains.
    single = poptorch.trainingModel(Net(), poptorch.Options())
    single(torch.randn(8, 3), torch.zeros(8, 1))
    single.destroy()


class NormClassifier(ClassifierBase):
    """A classifier with BatchNorm, whose training step writes num_batches_tracked and the running statistics."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.norm = torch.nn.BatchNorm1d(5)
        self.layer = torch.nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.norm(x))


def test_trainer_with_replicas_trains_a_batchnorm_model(tmp_path: Path) -> None:
    module = NormClassifier(rows=64, batch_size=4)
    trainer = _trainer(tmp_path, devices=2, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(module)
    assert trainer.global_step == 2
    assert trainer.strategy.training_opts.broadcast_buffers is False
    assert int(module.norm.num_batches_tracked) == 2  # replica 0's statistics, one update per host call


# -- 2. operations after a `with poptorch.Block(...)` ends ---------------------------------------------------------


def test_an_operation_after_a_block_ends_is_refused_as_poptorch_does() -> None:
    # poptorch's tests/pipelining_test.py::test_missing_block
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            poptorch.Block.useAutoId()
            with poptorch.Block(ipu_id=0):
                x = x * 4
            x = x * 4
            return x

    opts = poptorch.Options().deviceIterations(2)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
    with pytest.raises(poptorch.Error, match="No active Block, all the ops must belong to a Block"):
        poptorch.inferenceModel(Model(), opts).compile(torch.randn(2, 5))


class LastBlockLoss(ClassifierBase):
    """Two ``with`` blocks; the loss is computed in the last one and logged after it, as poptorch needs."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.body = torch.nn.Linear(5, 8)
        self.head = torch.nn.Linear(8, 2)

    def _logits(self, x: torch.Tensor, y: torch.Tensor) -> Any:
        with poptorch.Block(ipu_id=0):
            x = torch.relu(self.body(x))
        with poptorch.Block(ipu_id=1):
            logits = self.head(x)
            return logits, F.cross_entropy(logits, y)

    def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
        _, loss = self._logits(*batch)
        self.log("train_loss", loss)  # after the block: logging adds no operation
        self.log("constant", 3)  # a Python number stays on the host
        return loss

    def validation_step(self, batch: Any, batch_idx: Any) -> None:
        x, y = batch
        with poptorch.Block(ipu_id=0):
            x = torch.relu(self.body(x))
        with poptorch.Block(ipu_id=1):
            accuracy = (self.head(x).argmax(-1) == y).float().mean()
        self.log("val_acc", accuracy)


def test_a_step_whose_last_block_holds_the_loss_trains(tmp_path: Path) -> None:
    module = LastBlockLoss(rows=96, batch_size=2)
    # Two pipeline stages: training needs accumulation >= 3, evaluation device iterations >= 2.
    trainer = _trainer(
        tmp_path,
        strategy=IPUStrategy(device_iterations=2),
        accumulate_grad_batches=3,
        limit_train_batches=2,
        limit_val_batches=2,
    )
    before = module.head.weight.detach().clone()
    trainer.fit(module)
    assert trainer.global_step == 2
    assert not torch.equal(before, module.head.weight)
    assert {"train_loss", "constant", "val_acc"} <= set(trainer.callback_metrics)
    assert float(trainer.callback_metrics["constant"]) == 3.0


class LossAfterTheBlocks(LastBlockLoss):
    def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
        logits, _ = self._logits(*batch)
        return F.cross_entropy(logits, batch[1])  # after the last block ended


def test_a_loss_computed_after_the_last_block_is_refused_with_the_fix(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, accumulate_grad_batches=3, limit_train_batches=1, limit_val_batches=0)
    with pytest.raises(ConfigurationError) as caught:
        trainer.fit(LossAfterTheBlocks(rows=96, batch_size=2))
    message = str(caught.value)
    assert "poptorch could not compile the training model: No active Block, all the ops must belong to a Block" in (
        message
    )
    assert "inside the last `with poptorch.Block(...)`" in message


# -- 3. metric states moved to the IPU by a compile -------------------------------------------------------------


class Counted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        import torchmetrics

        self.fc = torch.nn.Linear(2, 1)
        self.seen = torchmetrics.SumMetric()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_compiling_leaves_metric_states_on_the_ipu_as_poptorch_does() -> None:
    # poptorch moves the module tree to ipu:0 to compile and moves back only parameters and buffers
    # (_poplar_executor.py:737-739, 894-916); an op on an IPU tensor outside a compile has no dispatch.
    model = Counted()
    poptorch.inferenceModel(model)(torch.ones(2, 2))
    assert type(model.fc.weight) is torch.nn.Parameter
    with pytest.raises(poptorch.Error, match="There is no active dispatch"):
        model.seen.update(torch.ones(1))
    assert model.seen.sum_value.cpu().item() == 0.0  # a copy to the host works


class HostCounted(ClassifierBase):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        import torchmetrics

        self.layer = torch.nn.Linear(5, 2)
        self.seen = torchmetrics.SumMetric()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def validation_step(self, batch: Any, batch_idx: Any) -> Any:
        return {"target": batch[1]}

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.update(torch.ones(len(outputs["target"])))

    def on_validation_epoch_end(self) -> None:
        self.log("seen", self.seen.compute())
        self.seen.reset()


def test_metrics_on_the_host_keep_working_across_compiles(tmp_path: Path) -> None:
    module = HostCounted(rows=32, batch_size=4)
    trainer = _trainer(tmp_path, limit_train_batches=2, num_sanity_val_steps=1)
    trainer.fit(module)  # compiles validation (sanity check), training, then uses validation again
    assert float(trainer.callback_metrics["seen"]) == 32
    trainer.validate(module, DataLoader(blobs(16), batch_size=4))  # a new compile after the metric was used
    assert float(trainer.callback_metrics["seen"]) == 16
    assert type(module.seen.sum_value) is torch.Tensor


# -- 4. a training model that never compiled cannot be wrapped again ----------------------------------------------


def test_destroying_a_training_model_that_never_compiled_keeps_it_wrapped_as_poptorch_does() -> None:
    # python/_poplar_executor.py:1482-1486 returns before unwrapping; __init__.py:703-707 refuses the second wrap.
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.mse_loss(self.fc(x), y)

    model = Net()
    poptorch.trainingModel(model).destroy()
    with pytest.raises(RuntimeError, match=r"Model has already been wrapped in 'poptorch.trainingModel'"):
        poptorch.trainingModel(model)
    compiled_model = Net()
    executor = poptorch.trainingModel(compiled_model)
    executor(torch.ones(2, 2), torch.zeros(2, 1))
    executor.destroy()  # compiled: unwraps
    poptorch.trainingModel(compiled_model).destroy()


def _finetuning_fit(tmp_path: Path, **kwargs: Any) -> tuple[Trainer, Any]:
    from lightning.pytorch.callbacks import BackboneFinetuning, ModelCheckpoint
    from test_ipu_lightning_tools import Backboned

    model = Backboned()
    callbacks = [BackboneFinetuning(unfreeze_backbone_at_epoch=0), ModelCheckpoint(dirpath=tmp_path, save_last=True)]
    trainer = _trainer(tmp_path, callbacks=callbacks, enable_checkpointing=True, limit_val_batches=1, **kwargs)
    return trainer, model


def test_backbone_finetuning_from_epoch_0_trains_the_backbone(tmp_path: Path) -> None:
    trainer, model = _finetuning_fit(tmp_path)
    before = model.backbone[0].weight.detach().clone()
    with warnings_as_list() as caught:
        trainer.fit(model)
    assert trainer.global_step > 0
    assert not torch.equal(before, model.backbone[0].weight)  # unfrozen before the first compile, and trained
    assert len(trainer.optimizers[0].param_groups) == 2
    assert not [w for w in caught if "compiled again" in str(w.message)]  # nothing was compiled twice


def test_resuming_a_finetuning_run_trains_on(tmp_path: Path) -> None:
    trainer, model = _finetuning_fit(tmp_path)
    trainer.fit(model)
    resumed, model = _finetuning_fit(tmp_path, max_epochs=2)
    # BaseFinetuning restores its parameter groups in on_fit_start, after the strategy is set up.
    resumed.fit(model, ckpt_path=str(tmp_path / "last.ckpt"))
    assert resumed.global_step == 2 * trainer.global_step
    assert len(resumed.optimizers[0].param_groups) == 2


def warnings_as_list() -> Any:
    import warnings

    return warnings.catch_warnings(record=True)


# -- 5. pipeline stages counted at every change of IPU, from IPU 0 ----------------------------------------------


class HeadOnIPU1(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.head = poptorch.BeginBlock(torch.nn.Linear(4, 1), ipu_id=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.head(self.body(x)), y)


def test_layers_before_the_first_block_are_a_stage_on_ipu_0_as_in_poptorch() -> None:
    # Compiler.cpp:1286-1296 counts a switch from IPU 0; training needs 2 x 2 - 1 = 3 (Compiler.cpp:675-700).
    with pytest.raises(
        poptorch.Error,
        match=r"gradientAccumulation must be greater than or equal to the number of pipeline stages \(3\)",
    ):
        poptorch.trainingModel(HeadOnIPU1())(torch.ones(2, 4), torch.zeros(2, 1))
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)
    executor = poptorch.trainingModel(HeadOnIPU1(), opts)
    executor(torch.ones(6, 4), torch.zeros(6, 1))
    executor.destroy()


def test_blocks_on_one_ipu_are_one_stage_as_in_poptorch() -> None:
    # "two blocks/stages with the same IPU ID will be merged" (CompilerImpl.cpp:478-494)
    class TwoBlocksOneIPU(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = poptorch.BeginBlock(torch.nn.Linear(4, 4), ipu_id=0)
            self.b = poptorch.BeginBlock(torch.nn.Linear(4, 1), ipu_id=0)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.mse_loss(self.b(self.a(x)), y)

    opts = poptorch.Options().setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
    executor = poptorch.trainingModel(TwoBlocksOneIPU(), opts)
    executor(torch.ones(2, 4), torch.zeros(2, 1))  # one stage: no accumulation needed
    executor.destroy()


class HeadOnly(ClassifierBase):
    """Only the head is annotated: the layers before it run on IPU 0, so the model has 2 stages."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.body = torch.nn.Linear(5, 8)
        self.head = poptorch.BeginBlock(torch.nn.Linear(8, 2), ipu_id=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


def test_a_head_only_pipeline_without_accumulation_is_refused_with_the_fix(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, limit_train_batches=1, limit_val_batches=0)
    with pytest.raises(ConfigurationError) as caught:
        trainer.fit(HeadOnly(rows=64))
    message = str(caught.value)
    assert "number of pipeline stages (3)" in message
    assert "Trainer(accumulate_grad_batches=3) or more; it has 1" in message
    assert "starting from IPU 0, where the layers before the first block run" in message


def test_a_head_only_pipeline_trains_with_enough_accumulation(tmp_path: Path) -> None:
    trainer = _trainer(
        tmp_path,
        strategy=IPUStrategy(device_iterations=2),
        accumulate_grad_batches=3,
        limit_train_batches=2,
        limit_val_batches=1,
    )
    trainer.fit(HeadOnly(rows=96))
    assert trainer.global_step == 2


# -- 10. a BatchSampler subclass with its own batching ----------------------------------------------------------


class Buckets(BatchSampler):
    """Length bucketing stand-in: batches of indices taken from the end of the dataset first."""

    def __iter__(self) -> Any:
        indices = list(reversed(range(len(self.sampler))))  # type: ignore[arg-type]
        for start in range(0, len(indices) - self.batch_size + 1, self.batch_size):
            yield indices[start : start + self.batch_size]


class SeesBatches(ClassifierBase):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.layer = torch.nn.Linear(5, 2)
        self.first_rows: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.first_rows.append(batch[0][:, 0].clone())

    def train_dataloader(self) -> DataLoader[Any]:
        data = blobs(self.rows)
        return DataLoader(data, batch_sampler=Buckets(SequentialSampler(data), batch_size=4, drop_last=True))


def test_a_batch_sampler_subclass_keeps_its_batching(tmp_path: Path) -> None:
    module = SeesBatches(rows=32)
    trainer = _trainer(tmp_path, strategy=IPUStrategy(device_iterations=2), limit_train_batches=2, limit_val_batches=0)
    trainer.fit(module)
    data = blobs(32).tensors[0][:, 0]
    # One host call takes 2 of the sampler's batches: indices 31..28 then 27..24.
    torch.testing.assert_close(module.first_rows[0], data[[31, 30, 29, 28, 27, 26, 25, 24]])
    torch.testing.assert_close(module.first_rows[1], data[list(range(23, 15, -1))])
