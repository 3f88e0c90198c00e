"""Train the digits on two emulated HPUs with DeepSpeed from a script importing only Lightning (plus torch, sklearn).

Run as: LIGHTNING_ACCEL_EMULATE=hpu python examples/deepspeed_hpu/train_digits_zero3.py --out DIR [--strategy NAME]
[--precision P] [--epochs N]. Lightning starts the second
process by running this script again. Rank 0 writes ``DIR/result.json``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader, TensorDataset

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class Digits(LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        if batch_idx == 0:  # where the batch and the model are: the HPU
            self.seen_devices = [x.device.type, self.device.type]
        loss = torch.nn.functional.cross_entropy(self(x).float(), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        accuracy = (self(x).argmax(-1) == y).float().mean()
        self.log("val_acc", accuracy, sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


def loaders() -> tuple[DataLoader, DataLoader, torch.Tensor, torch.Tensor]:
    digits = torch.load(DIGITS)
    features, labels = digits["features"], digits["labels"]
    x = features.float() / 16.0
    y = labels.long()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, val = order[:1400], order[1400:]
    return (
        DataLoader(TensorDataset(x[train], y[train]), batch_size=32, shuffle=True),
        DataLoader(TensorDataset(x[val], y[val]), batch_size=128),
        x[val],
        y[val],
    )


def _deepspeed_accelerator() -> str:
    from deepspeed.accelerator import get_accelerator

    return str(get_accelerator().device_name())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--strategy", default="hpu_deepspeed_stage_3")
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    seed_everything(0)
    train, val, val_x, val_y = loaders()

    def trainer(epochs: int) -> Trainer:
        return Trainer(
            accelerator="hpu",
            devices=2,
            strategy=args.strategy,
            precision=args.precision,
            max_epochs=epochs,
            default_root_dir=args.out,
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
            enable_checkpointing=False,
        )

    first = trainer(args.epochs)
    model = Digits()
    first.fit(model, train, val)
    accuracy = float(first.callback_metrics["val_acc"])
    checkpoint = os.path.join(args.out, "digits.ckpt")
    first.save_checkpoint(checkpoint)
    steps_before = first.global_step

    second = trainer(args.epochs + 1)
    second.fit(Digits(), train, val, ckpt_path=checkpoint)
    resumed_accuracy = float(second.callback_metrics["val_acc"])
    result = {
        "strategy": type(first.strategy).__name__,
        "precision": type(first.precision_plugin).__name__,
        "zero_stage": first.strategy.config["zero_optimization"]["stage"],
        "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
        "world_size": first.world_size,
        "devices_in_training_step": model.seen_devices,
        "deepspeed_accelerator": _deepspeed_accelerator(),
        "accuracy": accuracy,
        "steps_before": steps_before,
        "steps_after": second.global_step,
        "resumed_accuracy": resumed_accuracy,
        "checkpoint": checkpoint,
    }
    if second.is_global_zero:
        from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

        single = os.path.join(args.out, "digits_fp32.pt")
        convert_zero_checkpoint_to_fp32_state_dict(checkpoint, single)
        state = torch.load(single, weights_only=False)["state_dict"]
        fresh = Digits()
        fresh.load_state_dict(state)
        with torch.no_grad():
            result["converted_accuracy"] = float((fresh(val_x).argmax(-1) == val_y).float().mean())
        result["converted_dtypes"] = sorted({str(t.dtype) for t in state.values()})
        with open(os.path.join(args.out, "result.json"), "w") as handle:
            json.dump(result, handle)


if __name__ == "__main__":
    main()
