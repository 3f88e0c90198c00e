"""Train on two HPUs; or train and have rank 1 killed by SIGKILL mid-epoch; or resume from the last checkpoint.

usage: crash_resume.py STRATEGY OUT MODE   (MODE: whole | crash | resume; the final weights and the number of steps
this run trained go to OUT/<MODE>.pt)

Checkpoints are taken at the end of every epoch (``OUT/ckpts/last.ckpt``); the crash comes in the middle of the third
epoch, so the resumed run restarts from the end of the second, as a user's would.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

STRATEGY, OUT, MODE = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
EPOCHS, BATCHES, CRASH_STEP = 4, 4, 9  # step 9: the second batch of the third epoch


class Model(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
        self.steps_run = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if MODE == "crash" and self.global_rank == 1 and self.global_step == CRASH_STEP:
            os.kill(os.getpid(), signal.SIGKILL)
        self.steps_run += 1
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def main() -> None:
    seed_everything(0)
    x = torch.randn(BATCHES * 2 * 8, 16, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(x, x[:, :4].argmax(dim=1)), batch_size=8)  # 4 batches per rank
    checkpoints = ModelCheckpoint(dirpath=OUT / "ckpts", save_last=True, every_n_epochs=1)
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy=STRATEGY,
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoints],
    )
    model = Model()
    trainer.fit(model, loader, ckpt_path=str(OUT / "ckpts" / "last.ckpt") if MODE == "resume" else None)
    if trainer.is_global_zero:
        weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        torch.save({"weights": weights, "steps_run": model.steps_run}, OUT / f"{MODE}.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
