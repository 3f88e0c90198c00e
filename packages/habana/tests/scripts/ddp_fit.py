"""Child script of the distributed tests: train the digits classifier over emulated HCCL and dump each rank's result.

Lightning's launcher re-runs this file once per extra local process, so it must work as a plain script.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
from _habana_helpers import digits_classifier, digits_loaders
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything

from lightning_accel.habana import HPUAccelerator, HPUParallelStrategy

HOOK_CALLS = [0]
GLOBAL_RANK = [-1]


def _counted(hook: Any) -> Any:
    # Unannotated: torch checks a hook's annotations against dist.GradBucket and Future, and this module's are strings.
    def counted_hook(state, bucket):  # type: ignore[no-untyped-def]
        HOOK_CALLS[0] += 1
        return hook(state, bucket)

    return counted_hook


def _comm_hook(name: str) -> dict[str, Any]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, post_localSGD_hook

    if name == "bf16":
        return {"ddp_comm_hook": _counted(default_hooks.bf16_compress_hook)}
    if name == "fp16-wrapper":
        return {
            "ddp_comm_hook": _counted(default_hooks.allreduce_hook),
            "ddp_comm_wrapper": default_hooks.fp16_compress_wrapper,
        }
    if name == "post-localsgd":
        state = post_localSGD_hook.PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=4)
        return {
            "ddp_comm_state": state,
            "ddp_comm_hook": _counted(post_localSGD_hook.post_localSGD_hook),
            "model_averaging_period": 2,
        }
    return {}


class _Record(Callback):
    def __init__(self, out: Path) -> None:
        self.out = out
        self.devices: list[str] = []

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:  # where training_step will find the batch and the module
            self.devices = [batch[0].device.type, next(pl_module.parameters()).device.type]

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # On the HPU: an "hccl" group has no backend for host tensors (on Gaudi, and on the emulator).
        probe = torch.tensor([float(trainer.global_rank + 1)], device=pl_module.device)
        summed = trainer.strategy.reduce(probe.clone(), reduce_op="sum")
        maximum = trainer.strategy.reduce(probe.clone(), reduce_op="max")
        mean = trainer.strategy.reduce(probe.clone(), reduce_op="mean")
        token = trainer.strategy.broadcast(f"from-rank-{trainer.global_rank}", src=0)
        # A host tensor, as a metric computed on the CPU: HCCL serves HPU tensors only.
        host = trainer.strategy.reduce(torch.tensor([float(trainer.global_rank + 1)]), reduce_op="sum")
        GLOBAL_RANK[0] = trainer.global_rank
        torch.save(
            {
                "backend": dist.get_backend(),
                "world_size": dist.get_world_size(),
                "global_rank": trainer.global_rank,
                "node_rank": trainer.node_rank,
                "environment": type(trainer.strategy.cluster_environment).__name__,
                "sum": summed.item(),
                "max": maximum.item(),
                "mean": mean.item(),
                "host_sum": (host.device.type, host.item()),
                "broadcast": token,
                "devices": self.devices,
                "hls_module_id": os.environ.get("HLS_MODULE_ID"),
                "rendezvous": (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")),
                "state_dict": {k: v.detach().cpu() for k, v in pl_module.state_dict().items()},
                "hook_calls": HOOK_CALLS[0],
                "static_graph": bool(getattr(trainer.model, "static_graph", False)),
            },
            self.out / f"rank{trainer.global_rank}.pt",
        )


def _record_group_at_exit(out: Path) -> None:
    # Registered before the run, so it runs after every exit handler the run registers (atexit runs them last in,
    # first out): it sees whether the process group is still alive when the interpreter's teardown begins.
    def record() -> None:
        (out / f"rank{GLOBAL_RANK[0]}.exit.json").write_text(json.dumps({"group_alive": dist.is_initialized()}))

    atexit.register(record)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--by-name", action="store_true", help="select accelerator and strategy by string")
    parser.add_argument("--strategy", default="hpu_parallel", help="the strategy name, with --by-name")
    parser.add_argument("--comm-hook", default="", help="bf16, fp16-wrapper or post-localsgd")
    parser.add_argument("--static-graph", action="store_true", help="DDP's static_graph=True")
    args = parser.parse_args()
    _record_group_at_exit(args.out)
    seed_everything(11)
    model = digits_classifier()
    train, val = digits_loaders()
    if args.by_name:
        selection = {"accelerator": "hpu", "strategy": args.strategy}
    else:
        selection = {
            "accelerator": HPUAccelerator(),
            "strategy": HPUParallelStrategy(
                parallel_devices=[torch.device("hpu")] * args.devices,
                **_comm_hook(args.comm_hook),
                **({"static_graph": True} if args.static_graph else {}),
            ),
        }
    trainer = Trainer(
        **selection,
        devices=args.devices,
        num_nodes=args.num_nodes,
        max_epochs=2,
        limit_train_batches=6,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        callbacks=[_Record(args.out)],
    )
    trainer.fit(model, train, val)


if __name__ == "__main__":
    main()
