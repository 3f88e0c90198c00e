"""Lightning's batch-size finder on one HPU whose memory fills up, then a fit at the size found.

usage: scale_batch_size.py MODE   (MODE: power or binsearch, Tuner.scale_batch_size's mode)

Run with a small device memory (on the emulator, LIGHTNING_ACCEL_EMULATE_HPU_MEMORY, read when the SDK loads). The
model's activations grow with the batch (64 KiB a sample), so some power of two first overflows the device. Prints
one JSON line: the size found, the steps of the fit at that size, and what a fit at twice the last size that fitted
raises (type and text).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.tuner import Tuner
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

MODE = sys.argv[1]


class Wide(LightningModule):
    def __init__(self, batch_size: int = 2) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.net = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(1024, 64, generator=generator), torch.randn(1024, 1, generator=generator))
        return DataLoader(data, batch_size=self.batch_size)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(steps: int) -> Trainer:
    return Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


torch.manual_seed(0)
model = Wide()
fitting = trainer(4)
found = Tuner(fitting).scale_batch_size(model, mode=MODE)
assert found == model.batch_size, (found, model.batch_size)
fitting.fit(model)

# Twice the largest power of two that fitted, in a plain fit: the SDK's error, as Lightning's fit raises it.
largest_power = 1 << (found.bit_length() - 1)
failed: dict[str, str] = {}
try:
    trainer(1).fit(Wide(batch_size=2 * largest_power))
except RuntimeError as exc:
    failed = {"type": type(exc).__name__, "text": str(exc)}
print(json.dumps({"found": found, "steps": fitting.global_step, "twice": 2 * largest_power, "failed": failed}))
