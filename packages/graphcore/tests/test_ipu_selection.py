"""String selection (``Trainer(accelerator="ipu")``), the core's conformance kit, and a real training result."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.strategies import StrategyRegistry
from torch.utils.data import DataLoader, TensorDataset

import lightning_accel.graphcore
from lightning_accel.core.testing import AcceleratorConformance
from lightning_accel.graphcore import IPUAccelerator, IPUPrecision, IPUStrategy


def test_importing_the_package_does_not_import_poptorch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, lightning_accel.graphcore; "
        "assert 'poptorch' not in sys.modules and 'lightning_accel.poptorch_emulator' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert lightning_accel.graphcore.__all__


def test_string_selection_builds_the_ipu_classes(tmp_path: Path) -> None:
    trainer = Trainer(accelerator="ipu", devices=8, precision="16-mixed", default_root_dir=str(tmp_path), logger=False)
    assert isinstance(trainer.accelerator, IPUAccelerator)
    assert isinstance(trainer.strategy, IPUStrategy)
    assert isinstance(trainer.precision_plugin, IPUPrecision)
    assert len(trainer.strategy.parallel_devices) == 8


def test_strategy_string(tmp_path: Path) -> None:
    trainer = Trainer(accelerator="ipu", strategy="ipu_strategy", devices=2, logger=False)
    assert isinstance(trainer.strategy, IPUStrategy)


class TestIPUConformance(AcceleratorConformance):
    accelerator = "ipu"
    single_strategy = "ipu_strategy"
    parallel_strategy = "ipu_strategy"
    memory_stat = None  # poptorch reports no IPU memory to the host; get_device_stats gives the IPUs available


@pytest.mark.emulator_only  # the session's IPUs are the emulated ones: available whatever the machine has
def test_choosing_the_cpu_while_ipus_are_available_warns_as_lightning_does_for_an_unused_gpu(tmp_path: Path) -> None:
    unused = r"^IPU available but not used\. You can set it by doing `Trainer\(accelerator='ipu'\)`\.$"
    with pytest.warns(UserWarning, match=unused):
        Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="IPU available but not used")
        Trainer(accelerator="ipu", devices=1, default_root_dir=tmp_path, logger=False)


def test_ipu_accelerator_and_strategy_are_registered() -> None:
    # A registration regression must fail here, not turn the tests below into skips.
    assert AcceleratorRegistry["ipu"]["accelerator"].load() is IPUAccelerator
    assert StrategyRegistry["ipu_strategy"]["strategy"].load() is IPUStrategy


class Digits(LightningDataModule):
    def __init__(self, batch_size: int) -> None:
        super().__init__()
        from lightning_accel.core.testing import load_digits

        features, labels = load_digits()
        x, y = features.float() / 16.0, labels.long()
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        train, val = order[:1400], order[1400:]
        self.train_set, self.val_set = TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val])
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class DigitsNet(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: Any) -> None:
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(-1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def test_digits_classifier_on_8_ipus_reaches_real_accuracy(tmp_path: Path) -> None:
    torch.manual_seed(0)
    trainer = Trainer(
        accelerator="ipu",
        devices=8,
        max_epochs=8,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    trainer.fit(DigitsNet(), datamodule=Digits(batch_size=4))
    assert trainer.callback_metrics["val_acc"] > 0.85
