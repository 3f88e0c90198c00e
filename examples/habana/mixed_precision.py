"""Mixed precision with operator lists on HPUs (seed: 'Customize Mixed Precision').

The SDK reads its autocast operator lists (ATen names, one per line) once, when it loads, which in eager mode (the
default) is at ``import torch``: export them before the start, and pass the same files to the plugin.

Run:
    export PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST=examples/habana/ops_bf16_mnist.txt
    export PT_HPU_AUTOCAST_FP32_OPS_LIST=examples/habana/ops_fp32_mnist.txt
    LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/mixed_precision.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.habana import HPUPrecisionPlugin

HERE = Path(__file__).parent

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class LitClassifier(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(64, 128)
        self.l2 = torch.nn.Linear(128, 10)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        hidden = self.l1(x)
        logits = self.l2(torch.relu(hidden))
        loss = F.cross_entropy(logits, y)
        if batch_idx == 0 and self.current_epoch == 0:
            print(f"linear output: {hidden.dtype}, loss: {loss.dtype}, weights: {self.l1.weight.dtype}")
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def main() -> None:
    digits = torch.load(DIGITS)
    features, labels = digits["features"], digits["labels"]
    data = TensorDataset(features.float() / 16.0, labels.long())
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        plugins=[
            HPUPrecisionPlugin(
                precision="bf16-mixed",
                bf16_file_path=HERE / "ops_bf16_mnist.txt",
                fp32_file_path=HERE / "ops_fp32_mnist.txt",
            )
        ],
    )
    trainer.fit(LitClassifier(), DataLoader(data, batch_size=64, shuffle=True))
    # Without the lists: Trainer(accelerator="hpu", precision="bf16-mixed") uses the SDK's default lists.


if __name__ == "__main__":
    main()
