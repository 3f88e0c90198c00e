"""Metrics on IPUs: updated on the host from the step's outputs (right on hardware), never inside the step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torchmetrics
from ipu_models import Linear, blobs
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.graphcore import IPUAccelerator, IPUStrategy
from lightning_accel.graphcore.sdk import poptorch

ROWS = 64


class HostMetrics(Linear):
    """The documented way: steps return predictions and targets; the metrics are updated on the host."""

    def __init__(self) -> None:
        super().__init__(rows=ROWS, batch_size=2)
        self.train_seen = torchmetrics.SumMetric()
        self.val_seen = torchmetrics.SumMetric()
        self.val_accuracy = torchmetrics.classification.MulticlassAccuracy(num_classes=2, average="micro")

    def training_step(self, batch: Any, batch_idx: Any) -> Any:
        x, y = batch
        logits = self(x)
        return {"loss": F.cross_entropy(logits, y), "preds": logits.argmax(-1), "target": y}

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.train_seen.update(torch.ones(len(outputs["target"])))

    def validation_step(self, batch: Any, batch_idx: Any) -> Any:
        x, y = batch
        return {"preds": self(x).argmax(-1), "target": y}

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.val_seen.update(torch.ones(len(outputs["target"])))
        self.val_accuracy.update(outputs["preds"], outputs["target"])

    def on_validation_epoch_end(self) -> None:
        self.log("val_acc", self.val_accuracy.compute())

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(ROWS), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(ROWS, seed=1), batch_size=self.batch_size)


def _trainer(tmp_path: Path, strategy: IPUStrategy) -> Trainer:
    return Trainer(
        accelerator=IPUAccelerator(),
        strategy=strategy,
        devices=2,
        max_epochs=1,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )


def test_metrics_updated_on_the_host_see_every_sample(tmp_path: Path) -> None:
    model = HostMetrics()
    # Training returns the final micro-batch's outputs by default; OutputMode.All returns every micro-batch's.
    training_opts = poptorch.Options().outputMode(poptorch.OutputMode.All)
    trainer = _trainer(tmp_path, IPUStrategy(device_iterations=4, training_opts=training_opts))
    trainer.fit(model)
    assert int(model.train_seen.compute()) == ROWS
    assert int(model.val_seen.compute()) == ROWS
    x, y = blobs(ROWS, seed=1).tensors
    expected = (model(x).argmax(-1) == y).float().mean()
    torch.testing.assert_close(trainer.callback_metrics["val_acc"], expected)


def test_a_metric_updated_inside_the_step_is_refused_with_the_host_recipe(tmp_path: Path) -> None:
    class InStep(HostMetrics):
        def validation_step(self, batch: Any, batch_idx: Any) -> Any:
            x, y = batch
            self.val_accuracy.update(self(x).argmax(-1), y)

    with pytest.raises(ConfigurationError, match=r"validation_step updates the metric 'val_accuracy'.*on the host"):
        _trainer(tmp_path, IPUStrategy()).fit(InStep())
