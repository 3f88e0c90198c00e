"""Stage 3 with cpu_checkpointing and deepspeed.checkpointing.checkpoint on two HPUs; rank 0 writes DIR/result.json."""

from __future__ import annotations

import json
import os
import sys

import torch
from deepspeed.runtime.activation_checkpointing import checkpointing
from deepspeed.runtime.activation_checkpointing.checkpointing import checkpoint
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.deepspeed_hpu import HPUDeepSpeedStrategy


class Checkpointed(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.l2 = torch.nn.Linear(32, 4)
        self.l2_calls = 0
        self.losses: list[float] = []
        self.l2.register_forward_hook(lambda *args: setattr(self, "l2_calls", self.l2_calls + 1))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(checkpoint(self.l2, torch.relu(self.l1(x))), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 16)
    data = DataLoader(TensorDataset(x, (x[:, :4].argmax(1))), batch_size=8)
    model = Checkpointed()
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy=HPUDeepSpeedStrategy(stage=3, cpu_checkpointing=True),
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(model, data)
    if trainer.is_global_zero:
        result = {
            "steps": trainer.global_step,
            "l2_calls": model.l2_calls,
            "losses": model.losses,
            "device_type": trainer.strategy.root_device.type,
            # What DeepSpeed was told: whether checkpointed activations are copied to the host.
            "deepspeed_cpu_checkpoint": checkpointing.CPU_CHECKPOINT,
        }
        with open(os.path.join(sys.argv[1], "result.json"), "w") as handle:
            json.dump(result, handle)


if __name__ == "__main__":
    main()
