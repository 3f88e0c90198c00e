"""The digits classifier of ``train_digits.py`` behind LightningCLI, on Gaudi or on the HPU emulator.

The accelerator and the strategy are plain strings in ``config.yaml``; nothing in this file names a vendor class.

    LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/cli.py fit --config examples/habana/config.yaml
    LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/cli.py fit --config examples/habana/config.yaml \\
        --trainer.devices 2 --trainer.strategy hpu_parallel
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.cli import LightningCLI
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_digits import DigitsMLP, loaders


class DigitsData(LightningDataModule):
    """The 8x8 digits, split 80/20 with a fixed seed."""

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        self.train, self.val = loaders(self.batch_size)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return self.train

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return self.val


class DigitsCLI(LightningCLI):
    """Prints what ran and the final validation accuracy after ``fit``."""

    def after_fit(self) -> None:
        trainer = self.trainer
        if trainer.is_global_zero:
            print(f"accelerator: {type(trainer.accelerator).__name__}, strategy: {type(trainer.strategy).__name__}")
            if "val_acc" in trainer.callback_metrics:  # absent when fit stopped before the first validation
                print(f"final validation accuracy: {trainer.callback_metrics['val_acc'].item():.4f}")


def main() -> None:
    DigitsCLI(DigitsMLP, DigitsData, seed_everything_default=0, save_config_kwargs={"overwrite": True})


if __name__ == "__main__":
    main()
