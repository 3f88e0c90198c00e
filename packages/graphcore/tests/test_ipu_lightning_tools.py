"""Lightning's built-in callbacks and tuner on ``accelerator="ipu"``: each trains to the weights ``"cpu"`` gives.

Callbacks that change the model's structure between epochs (``ModelPruning`` re-parametrizes weights,
``BackboneFinetuning`` unfreezes them and adds an optimizer group) and ``Tuner.scale_batch_size`` (a new batch shape
per trial) make the strategy compile the training model again, as poptorch needs after ``destroy()``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from ipu_models import blobs
from lightning.pytorch import LightningModule, Trainer, callbacks, seed_everything
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.tuner import Tuner
from torch.utils.data import DataLoader

from lightning_accel.core.pycompat import strict_zip
from lightning_accel.graphcore import IPUAccelerator, IPUStrategy

ROWS = 32


class Backboned(LightningModule):
    """A backbone and a head (for BackboneFinetuning); no shuffling, so CPU and IPU see the same batches."""

    def __init__(self, lr: float = 0.1, batch_size: int = 4) -> None:
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 2)
        self.lr = lr
        self.batch_size = batch_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=self.lr)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(ROWS), batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(16, seed=1), batch_size=self.batch_size)


def _logged(trainer: Trainer, prefix: str) -> set[str]:
    path = Path(trainer.logger.log_dir) / "metrics.csv"  # type: ignore[union-attr]
    with path.open() as handle:
        return {name for name in next(csv.reader(handle)) if name.startswith(prefix)}


def _pruned(trainer: Trainer, model: LightningModule) -> None:
    assert (model.backbone[0].weight == 0).sum() >= 0.3 * model.backbone[0].weight.numel()


def _stopped_early(trainer: Trainer, model: LightningModule) -> None:
    assert trainer.current_epoch < 3


def _lr_logged(trainer: Trainer, model: LightningModule) -> None:
    assert _logged(trainer, "lr-SGD")


def _saved(trainer: Trainer, model: LightningModule) -> None:
    assert list(Path(trainer.checkpoint_callback.dirpath).glob("*.ckpt"))  # type: ignore[union-attr]


def _stats_logged(trainer: Trainer, model: LightningModule) -> None:
    assert _logged(trainer, "DeviceStatsMonitor")


def _one_step(trainer: Trainer, model: LightningModule) -> None:
    assert trainer.global_step == 1


def _two_batches(trainer: Trainer, model: LightningModule) -> None:
    assert trainer.num_training_batches == 2


def _unfrozen(trainer: Trainer, model: LightningModule) -> None:
    assert len(trainer.optimizers[0].param_groups) == 2


def _no_check(trainer: Trainer, model: LightningModule) -> None:
    return None


# WeightAveraging and EMAWeightAveraging came with Lightning 2.6 (pull request 20545); the IPU stack has 2.3.3.
_NO_WEIGHT_AVERAGING = pytest.mark.skipif(
    not hasattr(callbacks, "WeightAveraging"), reason="WeightAveraging is not in this Lightning (added in 2.6)"
)

CASES: list[Any] = [
    pytest.param(
        {"callbacks": lambda: [callbacks.ModelPruning("l1_unstructured", amount=0.3)]}, _pruned, id="ModelPruning"
    ),
    pytest.param(
        {"callbacks": lambda: [callbacks.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=1)], "max_epochs": 3},
        _no_check,
        id="StochasticWeightAveraging",
    ),
    pytest.param(
        {"callbacks": lambda: [callbacks.WeightAveraging()]},
        _no_check,
        id="WeightAveraging",
        marks=_NO_WEIGHT_AVERAGING,
    ),
    pytest.param(
        {"callbacks": lambda: [callbacks.BackboneFinetuning(unfreeze_backbone_at_epoch=1)]},
        _unfrozen,
        id="BackboneFinetuning",
    ),
    pytest.param(
        {
            "callbacks": lambda: [callbacks.EarlyStopping(monitor="val_loss", patience=0, min_delta=10.0)],
            "max_epochs": 4,
        },
        _stopped_early,
        id="EarlyStopping",
    ),
    pytest.param({"callbacks": lambda: [callbacks.LearningRateMonitor()]}, _lr_logged, id="LearningRateMonitor"),
    pytest.param({"callbacks": lambda: [callbacks.ModelCheckpoint(monitor="val_loss")]}, _saved, id="ModelCheckpoint"),
    pytest.param({"callbacks": lambda: [callbacks.DeviceStatsMonitor()]}, _stats_logged, id="DeviceStatsMonitor"),
    pytest.param({"tune": "lr_find"}, _no_check, id="Tuner.lr_find"),
    pytest.param({"tune": "scale_batch_size"}, _no_check, id="Tuner.scale_batch_size"),
    pytest.param({"overfit_batches": 2}, _two_batches, id="overfit_batches"),
    pytest.param({"fast_dev_run": True}, _one_step, id="fast_dev_run"),
]


def fit(accelerator: str, case: dict[str, Any], tmp_path: Path) -> tuple[Trainer, Backboned]:
    seed_everything(0)
    model = Backboned()
    options = dict(case)
    tune = options.pop("tune", None)
    made: Callable[[], list[Any]] = options.pop("callbacks", list)
    devices: dict[str, Any] = {"accelerator": accelerator, "devices": 1}
    if accelerator == "ipu":
        devices = {"accelerator": IPUAccelerator(), "strategy": IPUStrategy(), "devices": 1}
    root = tmp_path / accelerator
    trainer = Trainer(
        **devices,
        **{"max_epochs": 2, **options},
        default_root_dir=str(root),
        logger=CSVLogger(str(root)),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=made(),
    )
    if tune == "lr_find":
        Tuner(trainer).lr_find(model, num_training=4)
    elif tune == "scale_batch_size":
        # Doubles the batch size per trial: each trial compiles the IPU training model again.
        Tuner(trainer).scale_batch_size(model, max_trials=2, steps_per_trial=2)
    trainer.fit(model)
    return trainer, model


@pytest.mark.parametrize(("case", "check"), CASES)
def test_the_tool_trains_as_on_the_cpu(case: dict[str, Any], check: Any, tmp_path: Path) -> None:
    trainer, on_ipu = fit("ipu", case, tmp_path)
    check(trainer, on_ipu)
    _, on_cpu = fit("cpu", case, tmp_path)
    seed_everything(0)
    assert not torch.allclose(Backboned().head.weight, on_cpu.head.weight), "the CPU run did not train"
    for (name, got), want in strict_zip(on_ipu.state_dict().items(), on_cpu.state_dict().values()):
        torch.testing.assert_close(got, want, msg=lambda m, name=name: f"{name}: {m}")
