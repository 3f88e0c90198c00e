"""Models shared by the Lightning tests: the seed's two pipelined modules and small helpers."""

from __future__ import annotations

import os
from typing import Any

import poptorch
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, TensorDataset


def _cpu_has_float16_matmul() -> bool:
    try:
        torch.ones(1, 1, dtype=torch.float16) @ torch.ones(1, 1, dtype=torch.float16)
    except RuntimeError:
        return False
    return True


# torch 2.0 (the IPU stack's torch) has no float16 matrix product on the CPU, which backs the emulator by default;
# poptorch computes float16 on the IPU itself, so this is a limit of the emulator on that torch only.
needs_cpu_float16 = pytest.mark.skipif(
    not _cpu_has_float16_matmul() and os.environ.get("LIGHTNING_ACCEL_EMULATE_BACKEND", "cpu") == "cpu",
    reason="this torch has no float16 matrix product on the CPU that backs the emulator (torch 2.0)",
)


def blobs(rows: int, features: int = 5, seed: int = 0) -> TensorDataset:
    """A linearly separable 2-class problem (class = sign of the first feature)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, features, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long())


class ClassifierBase(LightningModule):
    """Common steps; subclasses define the layers and ``forward``."""

    def __init__(self, rows: int = 640, batch_size: int = 2, lr: float = 0.1) -> None:
        super().__init__()
        self.rows, self.batch_size, self.lr = rows, batch_size, lr

    def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: Any) -> None:
        x, y = batch
        self.log("val_acc", (self(x).argmax(-1) == y).float().mean())

    def predict_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(self.rows), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(self.rows, seed=1), batch_size=self.batch_size)


class Linear(ClassifierBase):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.layer = torch.nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class BeginBlockModule(ClassifierBase):
    """The seed's first model-parallel example: layer1 | layer2, layer3 | layer4 | softmax on IPUs 0-3."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # This will place layer1, layer2+layer3, layer4, softmax on different IPUs at runtime.
        self.layer1 = poptorch.BeginBlock(torch.nn.Linear(5, 10), ipu_id=0)
        self.layer2 = poptorch.BeginBlock(torch.nn.Linear(10, 5), ipu_id=1)
        self.layer3 = torch.nn.Linear(5, 5)
        self.layer4 = poptorch.BeginBlock(torch.nn.Linear(5, 5), ipu_id=2)
        self.softmax = poptorch.BeginBlock(torch.nn.Softmax(dim=1), ipu_id=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.softmax(self.layer4(self.layer3(self.layer2(self.layer1(x)))))


class BlockContextModule(ClassifierBase):
    """The seed's second model-parallel example: ``with poptorch.Block(ipu_id=...)`` inside forward and the steps.

    Once a ``with`` block ends, poptorch refuses every operation until the next block starts ("No active Block"),
    so the steps compute their loss and accuracy inside the last block; ``self.log`` may come after it.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.layer1 = torch.nn.Linear(5, 10)
        self.layer2 = torch.nn.Linear(10, 5)
        self.layer3 = torch.nn.Linear(5, 5)
        self.layer4 = torch.nn.Linear(5, 5)
        self.act = torch.nn.ReLU()
        self.softmax = torch.nn.Softmax(dim=1)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        with poptorch.Block(ipu_id=0):
            x = self.act(self.layer1(x))
        with poptorch.Block(ipu_id=1):
            x = self.act(self.layer2(x))
        with poptorch.Block(ipu_id=2):
            x = self.act(self.layer3(x))
            x = self.act(self.layer4(x))
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        with poptorch.Block(ipu_id=3):
            return self.softmax(x)

    def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
        x, y = batch
        x = self.features(x)
        with poptorch.Block(ipu_id=3):
            loss = F.cross_entropy(self.softmax(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: Any) -> None:
        x, y = batch
        x = self.features(x)
        with poptorch.Block(ipu_id=3):
            accuracy = (self.softmax(x).argmax(-1) == y).float().mean()
        self.log("val_acc", accuracy)
