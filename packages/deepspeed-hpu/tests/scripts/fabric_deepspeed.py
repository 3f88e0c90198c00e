"""A GPU-style Fabric DeepSpeed loop with only accelerator="hpu" changed, on two HPUs; rank 0 writes OUT/<phase>.json.

``--phase first`` trains STEPS steps, saves with ``fabric.save`` after HALF of them and goes on (the uninterrupted
run); ``--phase resume`` is a fresh run that loads that checkpoint with ``fabric.load`` and trains the rest.

Usage: fabric_deepspeed.py --out DIR --stage N --strategy name|lightning|hpu --phase first|resume
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import deepspeed
import torch
from deepspeed.accelerator import get_accelerator
from lightning.fabric import Fabric
from lightning.fabric.strategies import DeepSpeedStrategy

from lightning_accel.deepspeed_hpu.fabric import HPUDeepSpeedStrategy

STEPS, HALF, BATCH = 12, 6, 8


def batches(world_size: int, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each rank's share of a fixed regression problem, the same in every run."""
    generator = torch.Generator().manual_seed(1234)
    teacher = torch.randn(16, 4, generator=generator)
    x = torch.randn(STEPS * world_size * BATCH, 16, generator=generator)
    y = torch.tanh(x @ teacher)
    starts = [(step * world_size + rank) * BATCH for step in range(STEPS)]
    return [(x[start : start + BATCH], y[start : start + BATCH]) for start in starts]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stage", type=int, required=True)
    parser.add_argument("--strategy", choices=("name", "lightning", "hpu"), required=True)
    parser.add_argument("--phase", choices=("first", "resume"), required=True)
    args = parser.parse_args()

    # As a GPU script writes it: a name, or Lightning's own Fabric class; or this package's class.
    strategy: Any = {
        "name": f"deepspeed_stage_{args.stage}",
        "lightning": DeepSpeedStrategy(stage=args.stage),
        "hpu": HPUDeepSpeedStrategy(stage=args.stage),
    }[args.strategy]
    fabric = Fabric(accelerator="hpu", devices=2, strategy=strategy, precision="bf16-mixed")
    fabric.launch()
    fabric.seed_everything(7)
    with fabric.init_module():  # DeepSpeed's zero.Init under ZeRO-3: each rank makes only its partitions
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    partitioned_at_init = all(hasattr(p, "ds_id") for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = fabric.setup(model, optimizer)

    checkpoint = args.out / "checkpoint"
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 0}
    if args.phase == "resume":
        fabric.load(checkpoint, state)
    data = batches(fabric.world_size, fabric.global_rank)
    losses: dict[int, float] = {}
    devices = set()
    while state["step"] < STEPS:
        x, y = (fabric.to_device(t) for t in data[state["step"]])
        devices.add(x.device.type)
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses[state["step"]] = fabric.all_reduce(loss.detach(), reduce_op="mean").item()
        state["step"] += 1
        if args.phase == "first" and state["step"] == HALF:
            fabric.save(checkpoint, state)

    engine = model.module if hasattr(model, "module") else model
    with deepspeed.zero.GatheredParameters(list(engine.parameters()), enabled=args.stage == 3):
        weights = [p.detach().float().cpu().flatten().tolist() for p in engine.parameters()]
    if fabric.global_rank == 0:
        ds_engine = fabric.strategy.model
        result = {
            "strategy": type(fabric.strategy).__name__,
            "zero_stage": ds_engine.zero_optimization_stage(),
            "bf16": ds_engine.bfloat16_enabled(),
            "world_size": fabric.world_size,
            "backend": torch.distributed.get_backend(),
            "deepspeed_accelerator": get_accelerator().device_name(),
            "devices": sorted(devices),
            "parameter_device": next(engine.parameters()).device.type,
            "partitioned_at_init": partitioned_at_init,
            "losses": losses,
            "weights": weights,
        }
        (args.out / f"{args.phase}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
