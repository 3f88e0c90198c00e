"""torch.compile with the HPU backend (seed: 'Using torch.compile').

Run: LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/compile.py
torch.compile needs the SDK's eager mode (PT_HPU_LAZY_MODE=0, the default since SDK 1.21). On the emulator the backend
compiles with TorchInductor for the backing device; the first step takes a while.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class Classifier(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        # No self.log here: with torch 2.13 and Lightning 2.6, TorchDynamo fails to trace a compiled
        # LightningModule whose training_step logs (an upstream issue, independent of the backend).
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def main() -> None:
    digits = torch.load(DIGITS)
    features, labels = digits["features"], digits["labels"]
    x = features.float() / 16.0
    y = labels.long()
    model = Classifier()
    # torch lists "hpu_backend" from lightning-accel-habana's entry points: no HPU code has to run first.
    compiled_train_model = torch.compile(model, backend="hpu_backend")
    trainer = Trainer(
        accelerator="hpu", devices=1, max_epochs=3, logger=False, enable_checkpointing=False, enable_model_summary=False
    )
    trainer.fit(compiled_train_model, DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True))

    # A fresh module for inference: the trained one carries Lightning's compile bookkeeping.
    eval_model = Classifier().net
    eval_model.load_state_dict(model.net.state_dict())
    compiled_eval_model = torch.compile(eval_model.eval(), backend="hpu_backend")
    with torch.no_grad():
        accuracy = (compiled_eval_model(x).argmax(dim=1) == y).float().mean().item()
    print(f"accuracy of the compiled inference model: {accuracy:.3f}")


if __name__ == "__main__":
    main()
