"""Where the replica count comes from, and accumulation schedules: honoured exactly or refused, never wrong."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import poptorch
import pytest
import torch
from ipu_models import Linear, blobs
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import GradientAccumulationScheduler
from lightning.pytorch.trainer.states import RunningStage
from torch.utils.data import DataLoader

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.graphcore import IPUStrategy

QUIET: dict[str, Any] = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "num_sanity_val_steps": 0,
}


class Ordered(Linear):
    """No shuffling, no validation: the sequence of updates is fully determined."""

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(self.rows), batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self) -> Any:
        return []


class RecordReplicas(Callback):
    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        executor = trainer.strategy.poptorch_models[RunningStage.TRAINING]  # type: ignore[attr-defined]
        self.seen.append(int(executor.options.replication_factor))


# -- replicas ------------------------------------------------------------------------------------------------------


def test_options_decide_the_replicas_when_devices_is_not_given(tmp_path: Path) -> None:
    strategy = IPUStrategy(training_opts=poptorch.Options().replicationFactor(2))
    assert strategy.replication_factor == 2  # before any Trainer sees it
    record = RecordReplicas()
    trainer = Trainer(
        accelerator="ipu", strategy=strategy, default_root_dir=tmp_path, max_epochs=1, callbacks=[record], **QUIET
    )
    assert trainer.num_devices == 2
    assert strategy.replication_factor == 2
    trainer.fit(Ordered(rows=16))
    assert record.seen == [2, 2, 2, 2]  # 16 rows / (2 per micro-batch x 2 replicas): 4 host calls
    assert trainer.global_step == 4


def test_without_devices_or_options_every_emulated_ipu_is_a_replica(tmp_path: Path) -> None:
    trainer = Trainer(accelerator="ipu", default_root_dir=tmp_path, **QUIET)
    assert trainer.num_devices == 8
    assert trainer.strategy.replication_factor == 8  # type: ignore[attr-defined]


def test_explicit_devices_and_matching_options_agree(tmp_path: Path) -> None:
    options = poptorch.Options().replicationFactor(2)
    trainer = Trainer(accelerator="ipu", devices=2, strategy=IPUStrategy(training_opts=options), **QUIET)
    assert trainer.strategy.replication_factor == 2  # type: ignore[attr-defined]


def test_explicit_devices_contradicted_by_options_is_an_error(tmp_path: Path) -> None:
    options = poptorch.Options().replicationFactor(4)
    trainer = Trainer(
        accelerator="ipu", devices=2, strategy=IPUStrategy(training_opts=options), default_root_dir=tmp_path, **QUIET
    )
    with pytest.raises(
        ConfigurationError, match=r"training_opts.replicationFactor\(4\) contradicts Trainer\(devices=2\)"
    ):
        trainer.fit(Ordered(rows=16))


def test_training_and_inference_options_that_disagree_are_an_error() -> None:
    training = poptorch.Options().replicationFactor(2)
    inference = poptorch.Options().replicationFactor(1)
    with pytest.raises(
        ConfigurationError,
        match=r"training_opts=\.\.\. \.replicationFactor\(2\), inference_opts=\.\.\. \.replicationFactor\(1\)\): the "
        r"two options contradict each other",
    ):
        IPUStrategy(training_opts=training, inference_opts=inference)


def test_options_asking_for_more_replicas_than_ipus_is_an_error() -> None:
    strategy = IPUStrategy(training_opts=poptorch.Options().replicationFactor(16))
    with pytest.raises(ConfigurationError, match=r"replicationFactor\(16\), but only 8 IPU\(s\) can be reserved"):
        Trainer(accelerator="ipu", strategy=strategy, **QUIET)


# -- accumulation --------------------------------------------------------------------------------------------------


def _fit(model: Linear, tmp_path: Path, accelerator: str, callbacks: list[Callback], **kwargs: Any) -> Trainer:
    trainer = Trainer(
        accelerator=accelerator,
        devices=1,
        default_root_dir=tmp_path,
        max_epochs=2,
        callbacks=callbacks,
        **QUIET,
        **kwargs,
    )
    trainer.fit(model)
    return trainer


def test_a_constant_accumulation_schedule_gives_the_weights_of_a_cpu_run(tmp_path: Path) -> None:
    torch.manual_seed(0)
    ipu_model = Ordered(rows=32, batch_size=2)
    cpu_model = copy.deepcopy(ipu_model)
    ipu = _fit(ipu_model, tmp_path / "ipu", "ipu", [GradientAccumulationScheduler({0: 2})])
    cpu = _fit(cpu_model, tmp_path / "cpu", "cpu", [GradientAccumulationScheduler({0: 2})])
    assert cpu.global_step == 16  # 2 epochs x 16 batches / 2
    assert ipu.global_step == 16  # one host call (2 micro-batches) per update
    torch.testing.assert_close(ipu_model.state_dict(), cpu_model.state_dict())
    assert not torch.equal(ipu_model.layer.weight, Ordered(rows=32).layer.weight)


def test_an_accumulation_schedule_that_changes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"GradientAccumulationScheduler\(scheduling=\{0: 1, 1: 2\}\) changes accumulate_grad_batches between "
        r"epochs",
    ):
        _fit(Ordered(rows=32), tmp_path, "ipu", [GradientAccumulationScheduler({1: 2})])


def test_a_schedule_and_trainer_accumulation_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"Trainer\(accumulate_grad_batches=2\) and a GradientAccumulation"):
        _fit(Ordered(rows=32), tmp_path, "ipu", [GradientAccumulationScheduler({0: 2})], accumulate_grad_batches=2)


def test_changing_accumulate_grad_batches_during_fit_is_refused(tmp_path: Path) -> None:
    class Change(Callback):
        def on_train_epoch_start(self, trainer: Trainer, *args: Any) -> None:
            if trainer.current_epoch == 1:
                trainer.accumulate_grad_batches = 4

    with pytest.raises(
        ConfigurationError,
        match=r"accumulate_grad_batches was changed to 4 during fit, after the IPU training model was compiled with "
        r"Training.gradientAccumulation\(1\)",
    ):
        _fit(Ordered(rows=32), tmp_path, "ipu", [Change()])
