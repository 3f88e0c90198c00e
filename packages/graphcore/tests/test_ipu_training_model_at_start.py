"""``strategy.poptorch_models[RunningStage.TRAINING]`` exists from ``on_train_start``, as in the archived IPUStrategy.

The archived Lightning IPU integration wrapped the training model in ``setup`` and its users' callbacks read it in
``on_train_start`` (issue 47). The model is wrapped there and compiles at the first training call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from ipu_models import Linear
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import BackboneFinetuning
from lightning.pytorch.trainer.states import RunningStage


class ReadsTheTrainingModel(Callback):
    def __init__(self) -> None:
        self.at_start: list[tuple[str, bool]] = []

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        executor = trainer.strategy.poptorch_models[RunningStage.TRAINING]  # type: ignore[attr-defined]
        self.at_start.append((type(executor).__name__, executor.isCompiled()))


def _trainer(tmp_path: Path, *callbacks: Callback) -> Trainer:
    return Trainer(
        accelerator="ipu",
        devices=1,
        max_epochs=2,
        limit_train_batches=4,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=list(callbacks),
    )


def test_a_callback_reads_the_training_model_in_on_train_start(tmp_path: Path) -> None:
    callback = ReadsTheTrainingModel()
    trainer = _trainer(tmp_path, callback)
    trainer.fit(Linear(rows=32, batch_size=2))
    assert callback.at_start == [("PoplarExecutor", False)]
    assert trainer.global_step == 8


class Backbone(Linear):
    """A frozen-at-first backbone and a head; the optimizer holds what trains at setup (the head)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backbone = torch.nn.Linear(5, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.backbone(x))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=self.lr)


def test_what_trains_may_change_before_the_first_call(tmp_path: Path) -> None:
    # BackboneFinetuning freezes the backbone at setup and adds its parameter group at the start of epoch 0: the
    # wrapped, uncompiled model compiles with the new group, without being wrapped again.
    callback = ReadsTheTrainingModel()
    trainer = _trainer(tmp_path, callback, BackboneFinetuning(unfreeze_backbone_at_epoch=0, verbose=False))
    model = Backbone(rows=32, batch_size=2)
    before = model.backbone.weight.detach().clone()
    trainer.fit(model)
    assert callback.at_start == [("PoplarExecutor", False)]
    assert not model.backbone.weight.detach().equal(before)
