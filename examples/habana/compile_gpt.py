"""A small GPT-style language model trained with regional compilation on Gaudi (HPUCompile).

Run: LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/compile_gpt.py [--layers 4] [--max-steps 60]

The model is a decoder-only transformer (causal self-attention through scaled_dot_product_attention, an MLP,
pre-norm residual blocks in a ModuleList), trained in bf16-mixed on a character stream generated in code.
HPUCompile(regions=True) compiles each block in place with hpu_backend: the blocks share one compiled graph, so adding
layers adds no compile time. from_step=1 runs the first step eagerly (optimizer state is created outside the graphs).
torch.compile needs the SDK's eager mode (PT_HPU_LAZY_MODE=0, the default since SDK 1.21).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.habana import HPUCompile

TEXT = "the quick brown fox jumps over the lazy dog. " * 64
VOCAB = sorted(set(TEXT))


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class TinyGPT(LightningModule):
    def __init__(self, layers: int = 4, width: int = 64, heads: int = 4, context: int = 32) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(len(VOCAB), width)
        self.position = torch.nn.Parameter(torch.randn(context, width) / math.sqrt(width))
        self.blocks = torch.nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, len(VOCAB))
        self.losses: list[float] = []

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.position[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        ids, targets = batch
        loss = F.cross_entropy(self(ids).flatten(0, 1), targets.flatten())
        self.losses.append(loss.item())
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def windows(context: int = 32) -> TensorDataset:
    ids = torch.tensor([VOCAB.index(c) for c in TEXT])
    starts = range(0, len(ids) - context - 1, 4)
    inputs = torch.stack([ids[s : s + context] for s in starts])
    return TensorDataset(inputs, torch.stack([ids[s + 1 : s + context + 1] for s in starts]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=60)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TinyGPT(layers=args.layers)
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        precision="bf16-mixed",
        max_steps=args.max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[HPUCompile(regions=True, from_step=1)],
    )
    loader = DataLoader(windows(), batch_size=16, shuffle=True, drop_last=True)
    trainer.fit(model, loader)
    first, last = sum(model.losses[:5]) / 5, sum(model.losses[-5:]) / 5
    compiled = sum(block._compiled_call_impl is not None for block in model.blocks)
    print(f"blocks compiled: {compiled} of {len(model.blocks)}")
    print(f"loss: first steps {first:.3f}, last steps {last:.3f}")


if __name__ == "__main__":
    main()
