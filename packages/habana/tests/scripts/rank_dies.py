"""Two HPU ranks train with HCCL DDP until one of them dies by SIGKILL.

usage: rank_dies.py DEAD_RANK PID_DIR   (each rank writes its pid to PID_DIR/rank<N>.pid when training starts)
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

DEAD_RANK, PID_DIR = int(sys.argv[1]), Path(sys.argv[2])


class Model(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)

    def on_train_start(self) -> None:
        (PID_DIR / f"rank{self.global_rank}.pid").write_text(str(os.getpid()))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 3 and self.global_rank == DEAD_RANK:
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


x = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
trainer = Trainer(
    accelerator="hpu",
    devices=2,
    strategy="hpu_parallel",
    max_epochs=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Model(), loader)
