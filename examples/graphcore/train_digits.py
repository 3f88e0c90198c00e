"""Train a small MLP on the bundled 8x8 digits on Graphcore IPUs, or on the IPU emulator.

Run on a laptop (the emulator stands in for poptorch and emulates 8 IPUs):

    LIGHTNING_ACCEL_EMULATE=ipu python examples/graphcore/train_digits.py --devices 8 --device-iterations 2

The script imports only Lightning and torch: lightning-accel-graphcore registers ``accelerator="ipu"``
when Lightning is imported. ``--devices`` is the number of data-parallel replicas (1 or a power of two); each
Lightning batch is one host call of ``batch_size x device_iterations x devices`` samples, and the IPU makes
``device_iterations`` weight updates per call.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader, TensorDataset

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class DigitsMLP(LightningModule):
    """A two-layer perceptron for the 10 digit classes."""

    def __init__(self, hidden: int = 64, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        # Logged from the device on every host call (the value of the last micro-batch per replica, averaged).
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self(x).argmax(-1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def loaders(batch_size: int) -> tuple[DataLoader[tuple[torch.Tensor, ...]], DataLoader[tuple[torch.Tensor, ...]]]:
    """Train / validation loaders over the digits (1400 / 397 samples)."""
    digits = torch.load(DIGITS)
    x, y = digits["features"], digits["labels"]
    inputs = x.float() / 16.0
    labels = y.long()
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    train, val = order[:1400], order[1400:]
    return (
        DataLoader(TensorDataset(inputs[train], labels[train]), batch_size=batch_size, shuffle=True),
        DataLoader(TensorDataset(inputs[val], labels[val]), batch_size=batch_size),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8, help="IPU replicas: 1 or a power of two (default 8)")
    parser.add_argument("--device-iterations", type=int, default=1, help="weight updates per host call (default 1)")
    parser.add_argument("--batch-size", type=int, default=4, help="micro-batch size per replica (default 4)")
    parser.add_argument("--max-epochs", type=int, default=10)
    args = parser.parse_args()

    if args.device_iterations != 1:
        # poptorch applies POPTORCH_DEFAULT_OPTIONS to every poptorch.Options it creates, including the strategy's
        # (the same as passing IPUStrategy(device_iterations=...) from lightning_accel.graphcore).
        os.environ["POPTORCH_DEFAULT_OPTIONS"] = json.dumps({"deviceIterations": args.device_iterations})

    seed_everything(0)
    train, val = loaders(args.batch_size)
    trainer = Trainer(
        accelerator="ipu",
        devices=args.devices,
        max_epochs=args.max_epochs,
        enable_checkpointing=False,
        logger=False,
    )
    model = DigitsMLP()
    trainer.fit(model, train, val)
    accuracy = trainer.validate(model, val, verbose=False)[0]["val_acc"]
    print(f"final validation accuracy: {accuracy:.4f}")


if __name__ == "__main__":
    main()
