"""The user guide's training examples on two emulated HPUs; rank 0 writes DIR/result.json.

1. BF16 with a JSON-style config: WarmupDecayLR from the config, the optimizer from configure_optimizers,
   accumulate_grad_batches=2, ZeRO stage 2.
2. The BF16 optimizer (ZeRO-1, bf16, fp32 gradient accumulation) from a JSON file, with activation checkpointing
   (deepspeed.checkpointing.checkpoint, cpu_checkpointing=True in the config).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from deepspeed.runtime.activation_checkpointing.checkpointing import checkpoint
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.deepspeed_hpu import HPUDeepSpeedPrecisionPlugin, HPUDeepSpeedStrategy
from lightning_accel.habana import HPUAccelerator


class SampleModel(LightningModule):
    def __init__(self, checkpointed: bool = False) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(32, 32)
        self.l2 = torch.nn.Linear(32, 2)
        self.checkpointed = checkpointed
        self.l2_calls = 0
        self.l2.register_forward_hook(lambda *_: setattr(self, "l2_calls", self.l2_calls + 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        l1_out = torch.relu(self.l1(x))
        return checkpoint(self.l2, l1_out) if self.checkpointed else self.l2(l1_out)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch[0]).float().pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters())


class RecordLR(Callback):
    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_train_batch_end(self, trainer: Trainer, *args: object) -> None:
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    out = parser.parse_args().out
    seed_everything(0)
    data = DataLoader(TensorDataset(torch.randn(64, 32)), batch_size=2)
    parallel_hpus = [torch.device("hpu")] * HPUAccelerator.auto_device_count()
    parallel_hpus = parallel_hpus[:2]
    config = {
        "train_batch_size": 8,
        "bf16": {"enabled": True},
        "fp16": {"enabled": False},
        "train_micro_batch_size_per_gpu": 2,
        "scheduler": {
            "type": "WarmupDecayLR",
            "params": {
                "warmup_min_lr": 0.02,
                "warmup_max_lr": 0.05,
                "warmup_num_steps": 4,
                "total_num_steps": 8,
                "warmup_type": "linear",
            },
        },
        "zero_allow_untested_optimizer": True,
        "zero_optimization": {"stage": 2},
    }
    lrs = RecordLR()
    trainer = Trainer(
        accelerator=HPUAccelerator(),
        devices=2,
        strategy=HPUDeepSpeedStrategy(config=config, parallel_devices=parallel_hpus),
        enable_progress_bar=False,
        fast_dev_run=8,
        plugins=[HPUDeepSpeedPrecisionPlugin(precision="bf16-mixed")],
        use_distributed_sampler=False,
        limit_train_batches=16,
        accumulate_grad_batches=2,
        callbacks=[lrs],
    )
    trainer.fit(SampleModel(), data)
    engine = trainer.strategy.deepspeed_engine
    result = {
        "scheduler": type(trainer.lr_scheduler_configs[0].scheduler).__name__,
        "lrs": lrs.lrs,
        "accumulation": engine.gradient_accumulation_steps(),
        "optimizer_steps": trainer.global_step,
        "bf16": engine.bfloat16_enabled(),
        "basic_optimizer": type(engine.basic_optimizer).__name__,
    }

    bf16_config = {
        "bf16": {"enabled": True},
        "data_types": {"grad_accum_dtype": "fp32"},
        "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,
        "activation_checkpointing": {"partition_activations": True, "cpu_checkpointing": True},
    }
    # Every process reads the config while building its strategy, before any barrier, so every process writes the
    # (identical) file itself, atomically: no rank can see a missing or half-written file.
    path = os.path.join(out, "bf16_optimizer.json")
    partial = f"{path}.{os.getpid()}"
    with open(partial, "w") as handle:
        json.dump(bf16_config, handle)
    os.replace(partial, path)
    model = SampleModel(checkpointed=True)
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy=HPUDeepSpeedStrategy(config=path),
        precision="bf16-mixed",
        max_steps=3,
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, data)
    result["bf16_optimizer"] = type(trainer.strategy.deepspeed_engine.optimizer).__name__
    result["l2_calls"] = model.l2_calls
    if trainer.is_global_zero:
        with open(os.path.join(out, "result.json"), "w") as handle:
            json.dump(result, handle)


if __name__ == "__main__":
    main()
