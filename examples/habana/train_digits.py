"""Train a small MLP on the bundled 8x8 digits on Intel Gaudi (HPU), or on the HPU emulator.

Run on a laptop (the emulator stands in for the Habana SDK):

    LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/train_digits.py --devices 2 --max-epochs 10

The script imports only Lightning and torch: lightning-accel-habana registers ``accelerator="hpu"``
when Lightning is imported. Tensors are created on ``self.device``, never on ``device="hpu"``, so the same code runs
on Gaudi and on the emulator.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader, TensorDataset

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class DigitsMLP(LightningModule):
    """A two-layer perceptron for the 10 digit classes."""

    def __init__(self, hidden: int = 128, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        # Counters live on the model's device: self.device is the HPU.
        correct = torch.zeros((), device=self.device) + (self(x).argmax(dim=1) == y).sum()
        self.log("val_acc", correct / len(y), prog_bar=True, sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def loaders(batch_size: int) -> tuple[DataLoader, DataLoader]:
    """Split the digits 80/20 with a fixed seed."""
    digits = torch.load(DIGITS)
    features, labels = digits["features"], digits["labels"]
    x = features.float() / 16.0
    y = labels.long()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    cut = int(0.8 * len(x))
    train, val = order[:cut], order[cut:]
    return (
        DataLoader(TensorDataset(x[train], y[train]), batch_size=batch_size, shuffle=True),
        DataLoader(TensorDataset(x[val], y[val]), batch_size=256),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, choices=(1, 2), default=1, help="number of HPUs")
    parser.add_argument("--max-epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    seed_everything(0, workers=True)
    train, val = loaders(args.batch_size)
    trainer = Trainer(
        accelerator="hpu",
        devices=args.devices,
        max_epochs=args.max_epochs,
        enable_checkpointing=False,
        logger=False,
    )
    model = DigitsMLP()
    trainer.fit(model, train, val)
    if trainer.is_global_zero:
        print(f"final validation accuracy: {trainer.callback_metrics['val_acc'].item():.4f}")


if __name__ == "__main__":
    main()
