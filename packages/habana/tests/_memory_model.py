"""The small language model whose device memory the pre-flight report predicts, and the callback that measures it.

Shared by test_preflight_memory.py (DDP, FSDP2) and the DeepSpeed package's ZeRO comparison
(packages/deepspeed-hpu/tests/scripts/preflight_zero_memory.py, which puts this folder on its path): one model, so
that every strategy's prediction is checked against the same measured states.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["BATCH", "PeakOfSecondStep", "ShardedTinyLM", "TinyLM"]

# 2.6M parameters (10 MiB in float32): the parameters, gradients and optimizer state dominate the step's memory.
WIDTH, BLOCKS, VOCAB, LENGTH, BATCH = 256, 4, 1024, 32, 4


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
    """An embedding, four MLP blocks in a ModuleList, an output layer; AdamW.

    ``host_optimizer``: DeepSpeed's CPU Adam, the only optimizer DeepSpeed accepts when it offloads the optimizer.
    """

    def __init__(self, host_optimizer: bool = False) -> None:
        super().__init__()
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


class ShardedTinyLM(TinyLM):
    """:class:`TinyLM` under FSDP2: ``fully_shard`` per block, then the whole body (with a model-parallel strategy).

    A subclass, not an option: Lightning's DeepSpeed strategy builds the dataloader inside its device context when the
    module overrides ``configure_model``, where the CPU generator of ``train_dataloader`` is refused.
    """

    def configure_model(self) -> None:
        if self.device_mesh is not None:
            from torch.distributed.fsdp import fully_shard

            mesh = self.device_mesh["data_parallel"]
            for block in self.body.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(self.body, mesh=mesh)


class PeakOfSecondStep(Callback):
    """The device memory's peak over the second training step, as the pre-flight run reads it."""

    peak = 0

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        torch.hpu.synchronize()
        torch.hpu.reset_peak_memory_stats()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        torch.hpu.synchronize()
        if trainer.global_step == 2:
            self.peak = torch.hpu.max_memory_allocated()
