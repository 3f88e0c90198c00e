"""A ZeRO setup trains two steps of a small language model with HPUDeepSpeedStrategy on two emulated HPUs.

Rank N writes OUT/rankN.json: the device memory's peak over the second step (``torch.hpu.max_memory_allocated``
after a reset at the step's start, as the pre-flight run reads it) and the run's ZeRO config.

Usage: ``preflight_zero_memory.py OUT SETUP``, SETUP one of the pre-flight report's ZeRO strategies (``zero1``,
``zero2_offload``...). One setup per process: DeepSpeed's engine outlives ``Trainer.fit`` in the process, so a second
run would start with the first one's buffers still allocated.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.deepspeed_hpu import HPUDeepSpeedStrategy

# The model of packages/habana/tests/test_preflight_memory.py: 2.6M parameters (10 MiB in float32), so that the
# parameters, gradients and optimizer state dominate the step's memory.
WIDTH, BLOCKS, VOCAB, LENGTH, BATCH = 256, 4, 1024, 32, 4
# DeepSpeed's gradient buckets, in elements: 1 MiB each in float32, not the 800 MB each of the defaults (2e8
# elements), which would dwarf this model's states and make any prediction of them "within 10%".
BUCKET = 2**18


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.up = torch.nn.Linear(WIDTH, 4 * WIDTH)
        self.down = torch.nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Body(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class TinyLM(LightningModule):
    """An embedding, four MLP blocks in a ModuleList, an output layer; AdamW."""

    def __init__(self, host_optimizer: bool = False) -> None:
        super().__init__()
        # Offloading steps the optimizer on the host, where DeepSpeed accepts only its own CPU optimizers.
        self.host_optimizer = host_optimizer
        torch.manual_seed(0)
        self.body = Body()

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        tokens = batch[0]
        return torch.nn.functional.cross_entropy(self.body(tokens).flatten(0, 1), tokens.flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.host_optimizer:
            from deepspeed.ops.adam import DeepSpeedCPUAdam

            return DeepSpeedCPUAdam(self.parameters(), lr=1e-3, adamw_mode=True)
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self) -> DataLoader[Any]:
        tokens = torch.randint(0, VOCAB, (8 * BATCH, LENGTH), generator=torch.Generator().manual_seed(1))
        return DataLoader(TensorDataset(tokens), batch_size=BATCH)


class _Peak(Callback):
    """The device memory's peak over the second training step."""

    peak = 0

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        torch.hpu.synchronize()
        torch.hpu.reset_peak_memory_stats()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        torch.hpu.synchronize()
        if trainer.global_step == 2:
            self.peak = torch.hpu.max_memory_allocated()


def main() -> None:
    out, setup = sys.argv[1], sys.argv[2]
    stage, offload = int(setup[len("zero")]), setup.endswith("_offload")
    strategy = HPUDeepSpeedStrategy(
        stage=stage,
        offload_optimizer=offload,
        offload_parameters=offload and stage == 3,
        reduce_bucket_size=BUCKET,
        allgather_bucket_size=BUCKET,
    )
    peak = _Peak()
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy=strategy,
        max_steps=2,
        callbacks=[peak],
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(TinyLM(host_optimizer=offload))
    # The config the run used, for the prediction to read its ZeRO settings.
    config = {"zero_optimization": strategy.config["zero_optimization"]}
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as handle:
        json.dump({"peak": peak.peak, "config": config}, handle)
    # Gloo's threads can abort the interpreter at exit while the group is alive; end it first.
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
