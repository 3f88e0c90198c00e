"""Child script of test_fast_ddp.py: train the digits classifier on two emulated HPUs with DDP or fast_ddp.

Each rank starts from other weights (seeded by its rank), so the run shows that rank 0's weights reach every rank.
The gradients of every weight update are recorded, and the SDK's ``HPUGraph`` is wrapped to count its captures and
replays. Lightning's launcher re-runs this file once per extra local process, so it must work as a plain script.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from _habana_helpers import digits_classifier, digits_loaders
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from torch.nn.parallel import DistributedDataParallel

from lightning_accel.habana import HPUAccelerator, HPUFastDDPStrategy, HPUGraphs, HPUParallelStrategy, sdk

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


class _Record(Callback):
    def __init__(self, out: Path) -> None:
        self.out = out
        self.start: dict[str, torch.Tensor] = {}
        self.grads: list[dict[str, torch.Tensor]] = []

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.start = {k: v.detach().cpu().clone() for k, v in pl_module.state_dict().items()}

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        self.grads.append({n: p.grad.detach().cpu().clone() for n, p in pl_module.named_parameters()})

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        strategy = trainer.strategy
        model = trainer.model
        fusion = getattr(strategy, "fusion", None)
        graphs = next((cb for cb in trainer.callbacks if isinstance(cb, HPUGraphs)), None)  # type: ignore[attr-defined]
        cacher = None if graphs is None else graphs.cacher
        torch.save(
            {
                "strategy": type(strategy).__name__,
                "wrapped_in_ddp": isinstance(model, DistributedDataParallel),
                "reducer": any(hasattr(m, "reducer") for m in [model, *model.modules()]),
                "reductions": getattr(strategy, "gradient_reductions", None),
                "global_step": trainer.global_step,
                "hpu_graphs": getattr(strategy, "hpu_graphs", None),
                "graph_captures": getattr(fusion, "graph_captures", None),
                "graph_replays": getattr(fusion, "graph_replays", None),
                "gradient_copies": getattr(fusion, "gradient_copies", None),
                "sdk_graph_calls": dict(_SDK_GRAPH_CALLS),
                # HPUGraphs("fit"): the training graphs the SDK's ModuleCacher captured, and the calls they served.
                "training_graphs": None if cacher is None else len(cacher.model_dict),
                "training_graph_calls": None if cacher is None else sum(cacher.cached_hits_dict.values()),
                "start": self.start,
                "grads": self.grads,
                "state_dict": {k: v.detach().cpu() for k, v in pl_module.state_dict().items()},
            },
            self.out / f"rank{trainer.global_rank}.pt",
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--strategy", choices=["ddp", "fast_ddp"], required=True)
    parser.add_argument("--buffer-dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--no-graphs", action="store_true", help="HPUFastDDPStrategy(use_hpu_graphs=False)")
    # Lightning's optimizer_zero_grad sets gradients to None (torch's default); "zeros" keeps them allocated.
    parser.add_argument("--zero-grad", choices=["none", "zeros"], default="none")
    parser.add_argument("--hpu-graphs-fit", action="store_true", help="add HPUGraphs(stages=('fit',))")
    args = parser.parse_args()
    _count_sdk_graph_calls()
    seed_everything(11)
    train, _ = digits_loaders()
    # Other starting weights on each rank: the strategy must make them rank 0's.
    rank = int(__import__("os").environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(100 + rank)
    model = digits_classifier()
    if args.zero_grad == "zeros":
        model.optimizer_zero_grad = lambda epoch, batch_idx, optimizer: optimizer.zero_grad(set_to_none=False)
    devices = [torch.device("hpu")] * 2
    if args.strategy == "ddp":
        strategy: Any = HPUParallelStrategy(parallel_devices=devices)
    else:
        graphs = {"use_hpu_graphs": False} if args.no_graphs else {}  # else the default, True
        strategy = HPUFastDDPStrategy(
            parallel_devices=devices, buffer_dtype=getattr(torch, args.buffer_dtype), **graphs
        )
    trainer = Trainer(
        accelerator=HPUAccelerator(),
        strategy=strategy,
        devices=2,
        max_epochs=1,
        limit_train_batches=6,
        accumulate_grad_batches=args.accumulate,
        gradient_clip_val=0.5,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        callbacks=[_Record(args.out), *([HPUGraphs(stages=("fit",))] if args.hpu_graphs_fit else [])],
    )
    trainer.fit(model, train)


if __name__ == "__main__":
    main()
