"""The digits classifier of ``train_digits.py`` behind LightningCLI, on Graphcore IPUs or the IPU emulator.

``config.yaml`` gives the accelerator and the strategy as strings; ``config_device_iterations.yaml`` shows how to
pass strategy arguments (``device_iterations``) from YAML.

    LIGHTNING_ACCEL_EMULATE=ipu python examples/graphcore/cli.py fit --config examples/graphcore/config.yaml
    LIGHTNING_ACCEL_EMULATE=ipu python examples/graphcore/cli.py fit \\
        --config examples/graphcore/config_device_iterations.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.cli import LightningCLI
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_digits import DigitsMLP, loaders  # the model and data of the script next to this one


class DigitsData(LightningDataModule):
    """The 8x8 digits: 1400 samples to train on, 397 to validate."""

    def __init__(self, batch_size: int = 4) -> None:
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
        strategy = trainer.strategy
        iterations = getattr(strategy, "device_iterations", None)
        print(f"accelerator: {type(trainer.accelerator).__name__}, strategy: {type(strategy).__name__}")
        print(f"devices: {trainer.num_devices}, device iterations: {iterations}")
        if "val_acc" in trainer.callback_metrics:  # absent when fit stopped before the first validation
            print(f"final validation accuracy: {trainer.callback_metrics['val_acc'].item():.4f}")


def main() -> None:
    DigitsCLI(DigitsMLP, DigitsData, seed_everything_default=0, save_config_kwargs={"overwrite": True})


if __name__ == "__main__":
    main()
