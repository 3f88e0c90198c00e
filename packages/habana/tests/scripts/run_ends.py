"""Two HPU ranks train with HCCL DDP, and the run ends in the way the first argument names.

usage: run_ends.py HOW   (HOW: slow-rank, os-exit, sigint, callback-error)

- slow-rank: rank 1 leaves 8 seconds after rank 0 (a rank that takes its time to tear down);
- os-exit: every rank leaves with os._exit(0) right after fit (the exit of the troubleshooting guide);
- sigint: rank 0 is sent SIGINT (Ctrl-C) during training;
- callback-error: a callback raises on rank 0 during training.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

HOW = sys.argv[1]
if HOW == "sigint":
    # Ctrl-C as in a terminal: a shell starts a background job (CI's, say) with SIGINT ignored, and Python keeps an
    # ignored SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)


class Model(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if HOW == "sigint" and batch_idx == 3 and self.global_rank == 0:
            os.kill(os.getpid(), signal.SIGINT)
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Fails(Callback):
    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if HOW == "callback-error" and trainer.global_step == 3 and trainer.global_rank == 0:
            raise RuntimeError("a callback failed on rank 0")


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
    callbacks=[Fails()],
)
trainer.fit(Model(), loader)
sys.stdout.flush()
if HOW == "os-exit":
    os._exit(0)
if HOW == "slow-rank" and trainer.global_rank == 1:
    time.sleep(8)
