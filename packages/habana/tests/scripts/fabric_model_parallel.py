"""Child script of the model-parallel tests: Fabric trains the small Llama with FSDP2 on two emulated HPUs.

The model, data and parallelization are those of ``model_parallel_fit.py`` (so the losses compare with its one-HPU
reference), passed to Fabric's ``ModelParallelStrategy(parallelize_fn, ...)`` as a GPU script builds it. After
training, a distributed checkpoint is saved and loaded into a freshly set-up model and optimizer. Rank 0 writes
what it saw to ``result.pt``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from lightning.fabric import Fabric
from lightning.fabric.strategies import ModelParallelStrategy
from model_parallel_fit import GLOBAL_BATCH, llama, lm_loss, parallelize, tokens

DATA_PARALLEL = 2


def _batches(fabric: Fabric, data: torch.Tensor) -> list[torch.Tensor]:
    # Data-parallel rank r takes sequences r, r + 2, ... of each global batch, as the Trainer's sampler does.
    rank = fabric.strategy.device_mesh["data_parallel"].get_local_rank()  # type: ignore[attr-defined]
    return [
        data[i : i + GLOBAL_BATCH][rank::DATA_PARALLEL].to(fabric.device) for i in range(0, len(data), GLOBAL_BATCH)
    ]


def _set_up(fabric: Fabric) -> tuple[Any, Any]:
    model = fabric.setup_module(llama())
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0))
    return model, optimizer


def _val_loss(fabric: Fabric, model: Any) -> float:
    with torch.no_grad():
        losses = [lm_loss(model, batch) for batch in _batches(fabric, tokens(16, seed=2))]
    return float(fabric.all_reduce(torch.stack(losses).mean(), reduce_op="mean"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()

    strategy = ModelParallelStrategy(parallelize, data_parallel_size=DATA_PARALLEL, tensor_parallel_size=1)
    fabric = Fabric(accelerator="hpu", devices=DATA_PARALLEL, strategy=strategy)
    fabric.launch()
    model, optimizer = _set_up(fabric)
    losses = []
    for batch in _batches(fabric, tokens(64, seed=1))[: args.steps]:
        loss = lm_loss(model, batch)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(fabric.all_reduce(loss.detach(), reduce_op="mean")))
    val_loss = _val_loss(fabric, model)
    checkpoint = args.out / "checkpoint"
    fabric.save(checkpoint, {"model": model, "optimizer": optimizer, "step": len(losses)})

    fresh, fresh_optimizer = _set_up(fabric)
    state = {"model": fresh, "optimizer": fresh_optimizer, "step": 0}
    fabric.load(checkpoint, state)
    steps = sorted({float(s["step"]) for s in fresh_optimizer.state.values() if "step" in s})
    parameter = next(model.parameters())
    result = {
        "strategy": type(fabric.strategy).__name__,
        "parameter": (type(parameter).__name__, parameter.device.type),
        "losses": losses,
        "val_loss": val_loss,
        "loaded_val_loss": _val_loss(fabric, fresh),
        "loaded_step": state["step"],
        "loaded_optimizer_steps": steps,
        "checkpoint_is_dir": checkpoint.is_dir(),
    }
    if fabric.global_rank == 0:
        torch.save(result, args.out / "result.pt")


if __name__ == "__main__":
    main()
