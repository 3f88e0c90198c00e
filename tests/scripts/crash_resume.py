"""Train on two devices; or train and have one rank killed by SIGKILL mid-epoch; or resume from the last checkpoint.

usage: crash_resume.py STRATEGY OUT MODE   (MODE: whole | crash | resume; the final weights and the number of steps
this run trained go to OUT/<MODE>.pt)

Checkpoints are taken at the end of every epoch (``OUT/ckpts/last.ckpt``); the crash comes in the middle of the third
epoch, so the resumed run restarts from the end of the second, as a user's would. The HPU strategies run two processes
and rank 1 is killed; ``ipu_strategy`` runs two replicas in one process, which is killed. The kill and the step count
happen in a callback, on the host: an IPU runs ``training_step`` as a compiled program, not as Python at every step.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

STRATEGY, OUT, MODE = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
EPOCHS, BATCHES, CRASH_STEP = 4, 4, 9  # step 9: the second batch of the third epoch


class Model(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)


class CrashAndCount(Callback):
    def __init__(self) -> None:
        self.steps_run = 0

    def on_train_batch_start(self, trainer: Trainer, *args: Any) -> None:
        if MODE == "crash" and trainer.global_rank == trainer.world_size - 1 and trainer.global_step == CRASH_STEP:
            os.kill(os.getpid(), signal.SIGKILL)

    def on_train_batch_end(self, *args: Any) -> None:
        self.steps_run += 1


def host_weights(model: Model) -> dict[str, torch.Tensor]:
    if STRATEGY == "hpu_deepspeed_stage_3":
        import deepspeed  # ZeRO-3 keeps a shard of each parameter on each rank: gather them (on every rank)

        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def main() -> None:
    seed_everything(0)
    x = torch.randn(BATCHES * 2 * 8, 16, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(x, x[:, :4].argmax(dim=1)), batch_size=8)  # 4 batches per rank
    checkpoints = ModelCheckpoint(dirpath=OUT / "ckpts", save_last=True, every_n_epochs=1)
    counter = CrashAndCount()
    trainer = Trainer(
        accelerator="ipu" if STRATEGY == "ipu_strategy" else "hpu",
        devices=2,
        strategy=STRATEGY,
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoints, counter],
    )
    model = Model()
    trainer.fit(model, loader, ckpt_path=str(OUT / "ckpts" / "last.ckpt") if MODE == "resume" else None)
    weights = host_weights(model)
    if trainer.is_global_zero:
        torch.save({"weights": weights, "steps_run": counter.steps_run}, OUT / f"{MODE}.pt")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
