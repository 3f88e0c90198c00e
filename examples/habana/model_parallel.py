"""Tensor parallelism and FSDP2 on HPUs: ``strategy="hpu_model_parallel"``, Lightning's ModelParallelStrategy on Gaudi.

Run:
    LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/model_parallel.py                  # tensor parallel over 2 HPUs
    LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/model_parallel.py --data-parallel 2 --tensor-parallel 1  # FSDP2
    LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/model_parallel.py --data-parallel 2 --tensor-parallel 2  # 2-D

The model parallelizes itself in ``configure_model`` on the device mesh the strategy builds on the HPUs, as torch's
tensor-parallel tutorial writes a plan: each feed-forward block's first layer is split by columns, its second by rows
(one all-reduce per block), over the mesh's ``"tensor_parallel"`` dimension; then ``fully_shard`` (FSDP2, bfloat16
compute, float32 gradient reduction) shards every block and the whole model over ``"data_parallel"``. The checkpoint is
distributed: a folder with one file per rank, which loads on another layout. It imports only Lightning and torch:
lightning-accel-habana makes Lightning's ModelParallelStrategy run on HPUs. FSDP2 needs the SDK's eager
mode (PT_HPU_LAZY_MODE=0, the default since SDK 1.21). Lightning's launcher starts the other processes by running this
file again, hence the work under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer, seed_everything
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils.data import DataLoader, TensorDataset

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class FeedForward(torch.nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.w1 = torch.nn.Linear(width, hidden)
        self.w2 = torch.nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.w2(F.relu(self.w1(x)))


class Network(torch.nn.Module):
    def __init__(self, width: int = 128, hidden: int = 512, blocks: int = 2) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(64, width)
        self.blocks = torch.nn.ModuleList(FeedForward(width, hidden) for _ in range(blocks))
        self.head = torch.nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.embed(x))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Classifier(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = Network()

    def configure_model(self) -> None:
        tensor_parallel = self.device_mesh["tensor_parallel"]
        data_parallel = self.device_mesh["data_parallel"]
        if tensor_parallel.size() > 1:
            plan = {"w1": ColwiseParallel(), "w2": RowwiseParallel()}
            for block in self.model.blocks:
                parallelize_module(block, tensor_parallel, plan)
        if data_parallel.size() > 1:
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for block in self.model.blocks:
                fully_shard(block, mesh=data_parallel, mp_policy=policy)
            fully_shard(self.model, mesh=data_parallel, mp_policy=policy)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self.model(x).argmax(dim=1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # Built after configure_model: the optimizer holds the shards, so its state is sharded too.
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-parallel", type=int, default=1, help="size of the mesh's data-parallel dimension")
    parser.add_argument("--tensor-parallel", type=int, default=2, help="size of its tensor-parallel dimension")
    parser.add_argument("--max-epochs", type=int, default=10)
    args = parser.parse_args()

    seed_everything(0)
    digits = torch.load(DIGITS)
    features, labels = digits["features"], digits["labels"]
    x, y = features.float() / 16.0, labels.long()
    # Ranks of one tensor-parallel group see the same batches: the strategy samples over the data-parallel ranks only.
    train = DataLoader(TensorDataset(x[:1400], y[:1400]), batch_size=64, shuffle=True)
    val = DataLoader(TensorDataset(x[1400:], y[1400:]), batch_size=256)
    model = Classifier()
    total = sum(p.numel() for p in model.parameters())
    trainer = Trainer(
        accelerator="hpu",
        devices=args.data_parallel * args.tensor_parallel,
        # Lightning's own class, as a GPU script writes it: with accelerator="hpu" it runs as HPUModelParallelStrategy
        # (HCCL, the mesh on "hpu"); the string "hpu_model_parallel" gives the default layout (nodes x HPUs per node).
        strategy=ModelParallelStrategy(
            data_parallel_size=args.data_parallel, tensor_parallel_size=args.tensor_parallel
        ),
        max_epochs=args.max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(model, train, val)
    local = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in model.parameters())
    print(f"rank {trainer.global_rank} holds {local} of {total} parameters")
    trainer.save_checkpoint("model_parallel.ckpt")  # a folder: one shard file per rank
    if trainer.is_global_zero:
        print(f"validation accuracy: {float(trainer.callback_metrics['val_acc']):.3f}")


if __name__ == "__main__":
    main()
