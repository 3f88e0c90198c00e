"""A GPU user's DDP script with one of torch's gradient-compression hooks, run with only the accelerator changed.

The hook objects are torch's own, passed as GPU scripts pass them: ``DDPStrategy(ddp_comm_hook=bf16_compress_hook)``
(``--strategy lightning``; the core turns it into the HPU strategy for ``accelerator="hpu"``) or the HPU strategy's
instance (``--strategy hpu``). Lightning's launcher re-runs this file for the second process. Each rank saves its
losses, its final weights and the hook name DDP registered to ``--out``.
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
from lightning.pytorch.strategies import DDPStrategy
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

HOOKS: dict[str, dict[str, Any]] = {
    "bf16": {"ddp_comm_hook": default_hooks.bf16_compress_hook},
    "fp16": {"ddp_comm_hook": default_hooks.fp16_compress_hook},
    "bf16-wrapper": {
        "ddp_comm_hook": default_hooks.allreduce_hook,
        "ddp_comm_wrapper": default_hooks.bf16_compress_wrapper,
    },
    "fp16-wrapper": {
        "ddp_comm_hook": default_hooks.allreduce_hook,
        "ddp_comm_wrapper": default_hooks.fp16_compress_wrapper,
    },
}


class _Record(Callback):
    def __init__(self, out: Path) -> None:
        self.out = out
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, *args: Any) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        torch.save(
            {
                "losses": self.losses,
                "comm_hook": trainer.model._get_ddp_logging_data().get("comm_hook"),
                "device": next(pl_module.parameters()).device.type,
                "state_dict": {k: v.detach().cpu() for k, v in pl_module.state_dict().items()},
            },
            self.out / f"rank{trainer.global_rank}.pt",
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--accelerator", default="cuda")
    parser.add_argument("--hook", choices=sorted(HOOKS), required=True)
    parser.add_argument("--strategy", choices=["lightning", "hpu"], default="lightning")
    args = parser.parse_args()
    seed_everything(3)
    if args.strategy == "lightning":
        strategy: Any = DDPStrategy(**HOOKS[args.hook])
    else:
        from lightning_accel.habana import HPUParallelStrategy

        strategy = HPUParallelStrategy(**HOOKS[args.hook])
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=2,
        strategy=strategy,
        max_epochs=2,
        limit_train_batches=8,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[_Record(args.out)],
    )
    trainer.fit(digits_classifier(lr=3e-3), digits_loaders()[0])


if __name__ == "__main__":
    main()
