"""Child script of the profiler test: two emulated HPUs over HCCL, HPUProfiler(filename="perf-logs").

Lightning's launcher re-runs this file for the second rank, so it must work as a plain script.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from _habana_helpers import digits_loaders
from lightning.pytorch import LightningModule, Trainer, seed_everything

from lightning_accel.habana import HPUProfiler


class ProfiledClassifier(LightningModule):
    """The seed's custom profiling: a profiler referenced by the module, with profile() and start()/stop()."""

    def __init__(self, profiler: HPUProfiler) -> None:
        super().__init__()
        self.profiler = profiler
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        with self.profiler.profile("my_custom_action"):
            x = x * 1.0
        self.profiler.start("my_granular_action")
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.profiler.stop("my_granular_action")
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    seed_everything(3)
    profiler = HPUProfiler(dirpath=args.out, filename="perf-logs")
    train, _ = digits_loaders()
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy="hpu_parallel",
        max_epochs=1,
        limit_train_batches=8,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        profiler=profiler,
    )
    trainer.fit(ProfiledClassifier(profiler), train)


if __name__ == "__main__":
    main()
