"""ZeRO-Offload and ZeRO-Infinity (CPU) on two emulated HPUs: the optimizer (and, for stage 3, the parameters) live
in host memory and DeepSpeed's CPU Adam does the step there.

Run as: LIGHTNING_ACCEL_EMULATE=hpu python examples/deepspeed_hpu/zero_offload.py --out DIR
[--strategy hpu_deepspeed_stage_2_offload|hpu_deepspeed_stage_3_offload]. The first run builds DeepSpeed's
``cpu_adam`` op (about a minute on 2 cores; cached in ``TORCH_EXTENSIONS_DIR``). Rank 0 writes ``DIR/result.json``.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from lightning.pytorch import Trainer, seed_everything
from train_digits_zero3 import Digits, loaders


class OffloadedDigits(Digits):
    """The digits model with the optimizer offloading needs: DeepSpeed's CPU Adam."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return DeepSpeedCPUAdam(self.parameters(), lr=self.lr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--strategy", default="hpu_deepspeed_stage_2_offload")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    seed_everything(0)
    train, val, _, _ = loaders()
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy=args.strategy,
        precision="bf16-mixed",
        max_epochs=args.epochs,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(OffloadedDigits(), train, val)
    zero = trainer.strategy.config["zero_optimization"]
    if trainer.is_global_zero:
        result = {
            "accuracy": float(trainer.callback_metrics["val_acc"]),
            "stage": zero["stage"],
            "offload_optimizer": zero.get("offload_optimizer", {}).get("device"),
            "offload_param": zero.get("offload_param", {}).get("device"),
            "optimizer": type(trainer.strategy.deepspeed_engine.basic_optimizer).__name__,
        }
        with open(os.path.join(args.out, "result.json"), "w") as handle:
            json.dump(result, handle)


if __name__ == "__main__":
    main()
