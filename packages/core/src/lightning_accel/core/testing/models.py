"""A small real task for conformance and integration tests: the bundled 8x8 digits (no download)."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.testing.digits import load_digits

__all__ = ["DigitsClassifier", "DigitsDataModule", "digits_tensors"]


def digits_tensors() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Train and validation tensors of the 8x8 digits, scaled to [0, 1], with a fixed split."""
    features, labels = load_digits()
    x, y = features.float() / 16.0, labels.long()
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(x), generator=generator)
    split = int(0.8 * len(x))
    return x[order[:split]], y[order[:split]], x[order[split:]], y[order[split:]]


class DigitsDataModule(LightningDataModule):
    """Digits as a datamodule.

    Example:
        >>> dm = DigitsDataModule(batch_size=32)
        >>> dm.setup("fit")
        >>> next(iter(dm.train_dataloader()))[0].shape
        torch.Size([32, 64])
    """

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        x_train, y_train, x_val, y_val = digits_tensors()
        self.train_set = TensorDataset(x_train, y_train)
        self.val_set = TensorDataset(x_val, y_val)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader[Any]:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(TensorDataset(self.val_set.tensors[0]), batch_size=self.batch_size)


class DigitsClassifier(LightningModule):
    """A two-layer MLP that reaches over 90% validation accuracy on digits in a few epochs.

    Example:
        >>> model = DigitsClassifier()
        >>> model(torch.zeros(2, 64)).shape
        torch.Size([2, 10])
    """

    def __init__(self, hidden: int = 64, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), sync_dist=True)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(-1) == y).float().mean(), sync_dist=True)

    def predict_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        return self(batch[0]).argmax(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
