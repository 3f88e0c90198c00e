"""The self-test's model-parallel run: ``python -m lightning_accel.habana._selftest.model_parallel --out DIR ...``.

Started once per rank by the check (``LOCAL_RANK`` set), like ``distributed``. The classifier shards itself with
FSDP2 in ``configure_model``: ``fully_shard`` on each Linear layer and on the root over the mesh's ``"data_parallel"``
dimension (``data_parallel_size`` = the devices, ``tensor_parallel_size=1``). At the end of training, on the HPUs,
each rank writes a summary (``rank<N>.json``) to DIR: the mesh, the backend, its parameters (type, device, the
elements it holds of each) and the accuracy of the sharded model.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything

from lightning_accel.core.selftest.workloads import accuracy, classifier, loader

SAMPLES_PER_RANK = 512  # as in ``distributed``: every rank takes the steps one HPU takes in hpu.fit


def _shard(model: LightningModule) -> None:
    """``fully_shard`` each Linear layer, then the root, over the data-parallel dimension of the module's mesh."""
    from torch.distributed.fsdp import fully_shard

    mesh = model.device_mesh["data_parallel"]  # type: ignore[index]
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


class _Summary(Callback):
    """What each rank saw once training ended, while the model is still sharded on the HPUs."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        from torch.distributed.tensor import DTensor

        mesh = pl_module.device_mesh
        assert mesh is not None
        self.seen.update(
            mesh={"device_type": mesh.device_type, "shape": list(mesh.shape), "names": list(mesh.mesh_dim_names or ())},
            parameters={
                name: {
                    "type": type(p).__name__,
                    "device": p.device.type,
                    "local": (p.to_local() if isinstance(p, DTensor) else p).numel(),
                    "full": p.numel(),
                }
                for name, p in pl_module.named_parameters()
            },
            # Every rank runs the forward passes (FSDP2 gathers the shards for each).
            accuracy=accuracy(pl_module),
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--strategy", required=True)
    args = parser.parse_args()
    from lightning.pytorch.strategies import StrategyRegistry

    seed_everything(0)
    model = classifier()
    model.configure_model = lambda: _shard(model)  # Lightning's ModelParallelStrategy requires configure_model
    # The class registered under the name, FSDP2 over every rank (by default the name splits tensors over them).
    strategy = StrategyRegistry[args.strategy]["strategy"](data_parallel_size=args.devices, tensor_parallel_size=1)
    summary = _Summary()
    trainer = Trainer(
        accelerator="hpu",
        devices=args.devices,
        strategy=strategy,
        max_epochs=2,
        callbacks=[summary],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, loader(samples=SAMPLES_PER_RANK * args.devices))
    rank = trainer.global_rank
    result = {
        "rank": rank,
        "strategy": type(trainer.strategy).__name__,
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        "loss": float(trainer.callback_metrics["train_loss"]),
        **summary.seen,
    }
    (args.out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
