"""A Lightning script written for GPUs, run on Intel Gaudi (HPU) by changing only ``accelerator``.

Everything else is what a CUDA user writes: Lightning's own strategy name (``"ddp"``), float16 mixed precision with
loss scaling, SyncBatchNorm, gradient clipping, a checkpoint of the best epoch, and testing from it. On HPUs
Lightning's names select the HPU strategies (``"ddp"`` is ``HPUParallelStrategy`` over HCCL) and ``"16-mixed"``
scales the loss with ``HPUGradScaler``; ``docs/migration.md`` ("From CUDA") lists what maps and what differs.

    LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/from_gpu.py   # on a laptop, on the HPU emulator
    python examples/habana/from_gpu.py --strategy fsdp               # Lightning's FSDP name
    python examples/habana/from_gpu.py --accelerator cuda            # the unchanged GPU run, where CUDA is
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

ACCELERATOR = "hpu"  # was "cuda": the one line a GPU script changes

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class DigitsNet(LightningModule):
    """An MLP with batch normalization for the 10 digit classes."""

    def __init__(self, hidden: int = 128, lr: float = 5e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, hidden),
            torch.nn.BatchNorm1d(hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self(x).argmax(dim=1) == y).float().mean(), sync_dist=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(dim=1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> dict[str, object]:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.trainer.max_epochs)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


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
        DataLoader(TensorDataset(x[train], y[train]), batch_size=batch_size, shuffle=True, drop_last=True),
        DataLoader(TensorDataset(x[val], y[val]), batch_size=128),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", default=ACCELERATOR)
    parser.add_argument("--strategy", default="ddp", help="Lightning's names: ddp, ddp_spawn, fsdp, ...")
    parser.add_argument("--precision", default="16-mixed")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--max-epochs", type=int, default=6)
    args = parser.parse_args()

    seed_everything(0, workers=True)
    train, val = loaders(batch_size=64)
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        precision=args.precision,
        sync_batchnorm=True,
        gradient_clip_val=1.0,
        max_epochs=args.max_epochs,
        callbacks=[ModelCheckpoint(monitor="val_acc", mode="max")],
        logger=False,
        enable_progress_bar=False,
    )
    trainer.fit(DigitsNet(), train, val)
    results = trainer.test(ckpt_path="best", dataloaders=val, verbose=False)
    if trainer.global_rank == 0:
        plugin = trainer.precision_plugin
        scaler = getattr(plugin, "scaler", None)
        print(f"strategy: {type(trainer.strategy).__name__}, precision plugin: {type(plugin).__name__}")
        print(f"loss scaler: {type(scaler).__name__}, best checkpoint: {trainer.checkpoint_callback.best_model_path}")
        print(f"test accuracy of the best epoch: {results[0]['test_acc']:.3f}")


if __name__ == "__main__":
    main()
