"""HPUProfiler (seed: 'Working with HPUProfiler'): default, custom and distributed profiling.

Run: LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/profiler.py [--devices 2]
Traces land in ./profiler_logs; open them in chrome://tracing or TensorBoard's profiler plugin.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.habana import HPUProfiler

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class MyModel(LightningModule):
    def __init__(self, profiler: HPUProfiler | None = None) -> None:
        super().__init__()
        self.profiler = profiler
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def custom_processing_step_basic(self, data: torch.Tensor) -> torch.Tensor:
        assert self.profiler is not None
        with self.profiler.profile("my_custom_action"):
            data = data * 1.0
        return data

    def custom_processing_step_granular(self, data: torch.Tensor) -> torch.Tensor:
        assert self.profiler is not None
        self.profiler.start("my_custom_action_granular")
        data = data.clamp(0, 1)
        self.profiler.stop("my_custom_action_granular")
        return data

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        x = self.custom_processing_step_granular(self.custom_processing_step_basic(x))
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=1)
    args = parser.parse_args()
    digits = torch.load(DIGITS)
    features, labels = digits["features"], digits["labels"]
    data = TensorDataset(features.float() / 16.0, labels.long())
    # filename= gives one trace and one summary per rank.
    profiler = HPUProfiler(dirpath="profiler_logs", filename="perf-logs")
    trainer = Trainer(
        accelerator="hpu", devices=args.devices, max_epochs=1, limit_train_batches=10, logger=False, profiler=profiler
    )
    trainer.fit(MyModel(profiler), DataLoader(data, batch_size=64))


if __name__ == "__main__":
    main()
