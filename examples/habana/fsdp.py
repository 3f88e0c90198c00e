"""Fully Sharded Data Parallel on two HPUs: each rank holds half of the parameters (seed: lightning-habana's FSDP).

Run: LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/fsdp.py
It imports only Lightning and torch: "hpu_fsdp" is registered by lightning-accel-habana. FSDP needs the
SDK's eager mode (PT_HPU_LAZY_MODE=0, the default since SDK 1.21). Lightning's launcher starts the second process by
running this file again, hence the work under `if __name__ == "__main__":`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader, TensorDataset

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class Classifier(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self(x).argmax(dim=1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # Built after FSDP has sharded the model: the optimizer state is sharded too.
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def main() -> None:
    seed_everything(0)
    digits = torch.load(DIGITS)
    features, labels = digits["features"], digits["labels"]
    x, y = features.float() / 16.0, labels.long()
    train = DataLoader(TensorDataset(x[:1400], y[:1400]), batch_size=64, shuffle=True)
    val = DataLoader(TensorDataset(x[1400:], y[1400:]), batch_size=256)
    model = Classifier()
    total = sum(p.numel() for p in model.parameters())
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy="hpu_fsdp",
        precision="bf16-mixed",
        max_epochs=5,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(model, train, val)
    local = sum(p.numel() for p in model.parameters())  # this rank's shard
    print(f"rank {trainer.global_rank} holds {local} of {total} parameters")
    trainer.save_checkpoint("fsdp.ckpt")  # one file, gathered on rank 0 (state_dict_type="full")
    if trainer.is_global_zero:
        print(f"validation accuracy: {float(trainer.callback_metrics['val_acc']):.3f}")


if __name__ == "__main__":
    main()
