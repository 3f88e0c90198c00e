"""Per-rank memory of parameters, gradients and optimizer state, ZeRO stages 0 and 3; rank N writes DIR/rankN.json."""

from __future__ import annotations

import json
import os
import sys

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.deepspeed_hpu import HPUDeepSpeedStrategy, ZeroMemory, zero_memory


class Wide(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters())


class Measure(Callback):
    memory: ZeroMemory

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: object) -> None:
        self.memory = zero_memory(trainer.strategy.deepspeed_engine)  # type: ignore[attr-defined]


def main() -> None:
    out, result, rank = sys.argv[1], {}, 0
    for stage in (0, 3):
        measure = Measure()
        trainer = Trainer(
            accelerator="hpu",
            devices=2,
            strategy=HPUDeepSpeedStrategy(stage=stage),
            max_steps=2,
            callbacks=[measure],
            logger=False,
            enable_progress_bar=False,
            enable_checkpointing=False,
        )
        trainer.fit(Wide(), DataLoader(TensorDataset(torch.randn(16, 256)), batch_size=4))
        result[str(stage)] = vars(measure.memory)
        rank = trainer.global_rank
    with open(os.path.join(out, f"rank{rank}.json"), "w") as handle:
        json.dump(result, handle)
    # Gloo's threads can abort the interpreter at exit while the group is alive; end it first.
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
