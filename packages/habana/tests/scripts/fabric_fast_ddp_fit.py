"""Child script of test_fabric_fast_ddp.py: a Fabric loop on two emulated HPUs with Fabric's DDP or fast_ddp.

Each rank starts from other weights (seeded by its rank), so the run shows that rank 0's weights reach every rank.
The gradients of every weight update are recorded, and the SDK's ``HPUGraph`` is wrapped to count its captures and
replays. Fabric's launcher re-runs this file once per extra local process, so it must work as a plain script.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from _habana_helpers import digits_loaders
from lightning.fabric import Fabric, seed_everything
from torch.nn.parallel import DistributedDataParallel

from lightning_accel.habana import sdk
from lightning_accel.habana.fabric import HPUFastDDPStrategy

_SDK_GRAPH_CALLS = {"capture_begin": 0, "replay": 0}


def _count_sdk_graph_calls() -> None:
    """Wrap the SDK's HPUGraph, as the strategy reaches it, to count what it is asked to capture and replay."""
    hpu = sdk.hpu_module()

    class CountingHPUGraph(hpu.HPUGraph):  # type: ignore[misc, name-defined]
        def capture_begin(self, *args: Any, **kwargs: Any) -> None:
            _SDK_GRAPH_CALLS["capture_begin"] += 1
            super().capture_begin(*args, **kwargs)

        def replay(self, *args: Any, **kwargs: Any) -> None:
            _SDK_GRAPH_CALLS["replay"] += 1
            super().replay(*args, **kwargs)

    hpu.HPUGraph = CountingHPUGraph


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--strategy", choices=["hpu_ddp", "hpu_fast_ddp"], required=True)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--no-graphs", action="store_true", help="HPUFastDDPStrategy(use_hpu_graphs=False)")
    args = parser.parse_args()
    _count_sdk_graph_calls()
    strategy: Any = HPUFastDDPStrategy(use_hpu_graphs=False) if args.no_graphs else args.strategy
    fabric = Fabric(accelerator="hpu", strategy=strategy, devices=2)
    fabric.launch()
    seed_everything(11)
    train, _ = digits_loaders()
    # Other starting weights on each rank: the strategy must make them rank 0's.
    torch.manual_seed(100 + int(os.environ.get("LOCAL_RANK", "0")))
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    model, optimizer = fabric.setup(net, torch.optim.Adam(net.parameters(), lr=1e-2))
    loader = fabric.setup_dataloaders(train)
    start = {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
    grads: list[dict[str, torch.Tensor]] = []
    for index, (x, y) in enumerate(loader):
        if index == 6:
            break
        updating = (index + 1) % args.accumulate == 0
        with fabric.no_backward_sync(model, enabled=not updating):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            fabric.backward(loss)
        if updating:
            grads.append({n: p.grad.detach().cpu().clone() for n, p in net.named_parameters()})
            optimizer.step()
            optimizer.zero_grad()  # set_to_none=True, torch's default
    used = fabric.strategy
    fusion = used.fusions[0] if isinstance(used, HPUFastDDPStrategy) else None
    forward_module = model._forward_module
    torch.save(
        {
            "strategy": type(used).__name__,
            "wrapped_in_ddp": isinstance(forward_module, DistributedDataParallel),
            "reducer": any(hasattr(m, "reducer") for m in [forward_module, *forward_module.modules()]),
            "reductions": getattr(used, "gradient_reductions", None),
            "hpu_graphs": getattr(used, "hpu_graphs", None),
            "graph_captures": getattr(fusion, "graph_captures", None),
            "graph_replays": getattr(fusion, "graph_replays", None),
            "gradient_copies": getattr(fusion, "gradient_copies", None),
            "sdk_graph_calls": dict(_SDK_GRAPH_CALLS),
            "start": start,
            "grads": grads,
            "state_dict": {k: v.detach().cpu() for k, v in net.state_dict().items()},
        },
        args.out / f"rank{fabric.global_rank}.pt",
    )


if __name__ == "__main__":
    main()
