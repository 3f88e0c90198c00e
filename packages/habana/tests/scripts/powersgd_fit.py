"""Child script of test_powersgd.py: train the digits classifier with torch's PowerSGD hook over "hccl", two ranks.

Written as a GPU script is (``DDPStrategy(ddp_comm_state=PowerSGDState(...), ddp_comm_hook=powerSGD_hook)``), with the
HPU strategy and accelerator. Lightning's launcher re-runs this file once per extra local process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
from _habana_helpers import digits_classifier, digits_loaders
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

from lightning_accel.habana import HPUAccelerator, HPUParallelStrategy

START_ITER = 2


class _Record(Callback):
    def __init__(self, out: Path, state: powerSGD_hook.PowerSGDState) -> None:
        self.out = out
        self.state = state
        self.losses: list[float] = []

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        torch.save(
            {
                "backend": dist.get_backend(),
                "powersgd_iter": self.state.iter,
                # PowerSGD keeps its low-rank factors per bucket once it compresses (after start_powerSGD_iter).
                "p_devices": sorted({p.device.type for p in self.state.p_memory_dict.values()}),
                "error_devices": sorted({e.device.type for e in self.state.error_dict.values()}),
                "losses": self.losses,
                "state_dict": {k: v.detach().cpu() for k, v in pl_module.state_dict().items()},
            },
            self.out / f"rank{trainer.global_rank}.pt",
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    seed_everything(11)
    model = digits_classifier()
    train, _ = digits_loaders()
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=START_ITER)
    strategy = HPUParallelStrategy(
        parallel_devices=[torch.device("hpu")] * 2, ddp_comm_state=state, ddp_comm_hook=powerSGD_hook.powerSGD_hook
    )
    trainer = Trainer(
        accelerator=HPUAccelerator(),
        strategy=strategy,
        devices=2,
        max_epochs=1,
        limit_train_batches=8,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        callbacks=[_Record(args.out, state)],
    )
    trainer.fit(model, train)


if __name__ == "__main__":
    main()
