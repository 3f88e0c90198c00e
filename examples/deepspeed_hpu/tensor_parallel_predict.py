"""Tensor-parallel prediction on two emulated HPUs, compared with the unsharded model. Each rank writes DIR/rankN.pt.

The model is made on the host; DeepSpeed moves each rank's slices of it to the HPU, so a rank's device never holds
the whole model (each rank also records the peak of its device memory during the set-up, and the model's size).

Run as: LIGHTNING_ACCEL_EMULATE=hpu python examples/deepspeed_hpu/tensor_parallel_predict.py --out DIR --mode kwargs
or --mode config. Lightning starts the second process by running the script again.
"""

from __future__ import annotations

import argparse
import os

import torch
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.deepspeed_hpu import HPUDeepSpeedPrecisionPlugin, HPUDeepSpeedStrategy
from lightning_accel.habana import HPUAccelerator


class InferenceSample(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.l0 = torch.nn.Linear(16, 128)
        self.l1 = torch.nn.Linear(128, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l1(torch.relu(self.l0(x)))

    def predict_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch[0])


class SetupMemory(Callback):
    """The peak of this rank's device memory from before the strategy's set-up to the first batch."""

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        torch.hpu.reset_peak_memory_stats()

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.peak = torch.hpu.max_memory_allocated()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", default="kwargs")
    args = parser.parse_args()
    seed_everything(0)
    model = InferenceSample()
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())  # before DeepSpeed slices it
    x = torch.randn(24, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x)
    options = {"tensor_parallel": {"tp_size": 2}, "dtype": torch.float, "replace_with_kernel_inject": False}
    options["injection_policy"] = {InferenceSample: ("l1",)}
    devices = [torch.device("hpu")] * 2
    if args.mode == "config":
        strategy = HPUDeepSpeedStrategy(parallel_devices=devices, config=options)
    else:
        strategy = HPUDeepSpeedStrategy(parallel_devices=devices, **options)
    trainer = Trainer(
        accelerator=HPUAccelerator(),
        devices=2,
        strategy=strategy,
        plugins=[HPUDeepSpeedPrecisionPlugin("32-true")],
        logger=False,
        enable_progress_bar=False,
        callbacks=[setup_memory := SetupMemory()],
    )
    batches = trainer.predict(model, DataLoader(TensorDataset(x), batch_size=8))
    assert batches is not None
    replaced = sorted({type(m).__name__ for m in trainer.strategy.model.modules()})
    torch.save(
        {
            "predictions": torch.cat(batches),
            "expected": expected,
            "replaced": replaced,
            "setup_peak_bytes": setup_memory.peak,
            "model_bytes": model_bytes,
        },
        os.path.join(args.out, f"rank{trainer.global_rank}.pt"),
    )


if __name__ == "__main__":
    main()
