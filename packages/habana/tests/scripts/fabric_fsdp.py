"""Child script of the FSDP tests: Fabric trains the digits classifier with FSDP on two emulated HPUs, saves, loads.

By default everything is selected by name (``strategy="hpu_fsdp"``: sharded checkpoints, Fabric's default);
``--full`` builds the strategy instance with ``state_dict_type="full"``, auto-wrapping, activation checkpointing and
``HYBRID_SHARD`` over a ``device_mesh=(1, 2)`` tuple.
Each rank writes what it saw to ``rank<N>.pt``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
from _habana_helpers import digits_loaders
from lightning.fabric import Fabric


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def _strategy(full: bool) -> Any:
    if not full:
        return "hpu_fsdp"
    from lightning_accel.habana.fabric import HPUFSDPStrategy

    # HYBRID_SHARD over a (replicas, shards) mesh that Fabric builds on the HPUs: one replica of two shards.
    return HPUFSDPStrategy(
        state_dict_type="full",
        auto_wrap_policy={torch.nn.Linear},
        activation_checkpointing_policy={torch.nn.Linear},
        sharding_strategy="HYBRID_SHARD",
        device_mesh=(1, 2),
    )


def _mesh(strategy: Any) -> Any:
    mesh = strategy._fsdp_kwargs.get("device_mesh")
    return None if mesh is None else (mesh.device_type, tuple(mesh.shape))


def _accuracy(fabric: Fabric, model: torch.nn.Module, loader: Any) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += int((model(x).argmax(dim=1) == y).sum())
            total += len(y)
    model.train()
    counts = fabric.all_reduce(
        torch.tensor([correct, total], dtype=torch.float64, device=fabric.device), reduce_op="sum"
    )
    return float(counts[0] / counts[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    fabric = Fabric(accelerator="hpu", devices=2, strategy=_strategy(args.full), precision="bf16-mixed")
    fabric.launch()
    fabric.seed_everything(5)
    train, val = digits_loaders()
    train, val = fabric.setup_dataloaders(train, val)
    model = fabric.setup_module(_net())
    optimizer = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=1e-2))
    local_numel = sum(p.numel() for p in model.parameters())
    where = next(model.parameters()).device.type
    for _ in range(args.epochs):
        for x, y in train:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    accuracy = _accuracy(fabric, model, val)
    checkpoint = args.out / "fabric_fsdp.ckpt"
    fabric.save(checkpoint, {"model": model, "optimizer": optimizer, "epochs": args.epochs})
    saved = [p.detach().float().cpu().clone() for p in model.parameters()]

    fresh = fabric.setup_module(_net())
    fresh_optimizer = fabric.setup_optimizers(torch.optim.Adam(fresh.parameters(), lr=1e-2))
    state = {"model": fresh, "optimizer": fresh_optimizer, "epochs": 0}
    fabric.load(checkpoint, state)
    loaded = [p.detach().float().cpu().clone() for p in fresh.parameters()]
    result = {
        "strategy": type(fabric.strategy).__name__,
        "plugin": type(fabric.strategy.precision).__name__,
        "local_numel": local_numel,
        "total_numel": sum(p.numel() for p in _net().parameters()),
        "param_device": where,
        "accuracy": accuracy,
        "loaded_accuracy": _accuracy(fabric, fresh, val),
        "same_weights": all(torch.equal(a, b) for a, b in zip(saved, loaded, strict=True)),
        "epochs": state["epochs"],
        "optimizer_steps": [float(s["step"]) for s in fresh_optimizer.state.values() if "step" in s],
        "checkpoint_is_dir": checkpoint.is_dir(),
        "mesh": _mesh(fabric.strategy),
    }
    torch.save(result, args.out / f"rank{fabric.global_rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
