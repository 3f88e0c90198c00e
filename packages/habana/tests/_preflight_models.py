"""Tiny LightningModules, each with one hazard the pre-flight report must find (used by test_preflight.py).

docs/preflight.md shows the report of :class:`Hazards` with this file's line numbers: regenerate it when they move.
"""

from __future__ import annotations

import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, Dataset


class _Vectors(Dataset):
    def __init__(self, n: int = 16, width: int = 8) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, width, generator=generator)
        self.y = torch.randint(0, 4, (n,), generator=generator)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class Base(LightningModule):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(width, 4)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Vectors(width=self.layer.in_features), batch_size=4)


class Clean(Base):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)


class BincountLoss(Base):
    def training_step(self, batch, batch_idx):
        x, y = batch
        weights = 1.0 / (torch.bincount(y, minlength=4).float() + 1.0)  # HAZARD: bincount
        return torch.nn.functional.cross_entropy(self.layer(x), y, weight=weights)


class ItemInStep(Base):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.layer(x), y)
        if loss.item() > 1e6:  # HAZARD: item
            raise RuntimeError("diverged")
        return loss


class Int64Overflow(Base):
    def training_step(self, batch, batch_idx):
        x, y = batch
        ids = y * 3_000_000_000  # HAZARD: overflow
        offset = (ids % 7).float().mean()
        return torch.nn.functional.cross_entropy(self.layer(x), y) + 0 * offset


class Float64Loss(Base):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x).double(), y).float()  # HAZARD: float64


class _Sequences(Dataset):
    # Lengths that change from batch to batch, as unpadded text.
    lengths = (3, 5, 7, 9, 11, 13)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randn(self.lengths[i], 8, generator=torch.Generator().manual_seed(i))


class DynamicLength(Base):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Sequences(), batch_size=1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).pow(2).mean()  # HAZARD: dynamic


class Hazards(DynamicLength):
    """Several hazards in one step (the model of docs/preflight.md's report)."""

    def training_step(self, batch, batch_idx):
        out = self.layer(batch)  # batch: (1, length, 8), the length changes every step
        classes = out.argmax(-1).flatten()
        counts = torch.bincount(classes, minlength=4)  # no HPU kernel
        ids = classes * 3_000_000_000  # beyond int32
        loss = out.pow(2).mean() + 0 * (counts.float().mean() + (ids % 7).float().mean())
        if loss.item() > 1e6:  # a host synchronisation every step
            raise RuntimeError("diverged")
        return loss


class MeetsTheOtherMode(Clean):
    """A clean model whose run in each mode waits for the other mode's process to have started (bounded)."""

    def __init__(self, folder: str, wait: float = 120.0) -> None:
        super().__init__()
        self.folder, self.wait = folder, wait

    def on_train_start(self) -> None:
        import os
        import time
        from pathlib import Path

        mode = "lazy" if os.environ.get("PT_HPU_LAZY_MODE") == "1" else "compile"
        folder = Path(self.folder)
        (folder / mode).touch()
        deadline = time.monotonic() + self.wait
        while not all((folder / m).exists() for m in ("lazy", "compile")):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {mode} run waited {self.wait} s and the other mode's run never started")
            time.sleep(0.1)
