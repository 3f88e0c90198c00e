"""fp8 inference on Gaudi2 and later through Intel Neural Compressor (INC).

A digits classifier is trained in float32, then quantized to fp8 for inference in two runs, as on Gaudi:

1. ``HPUPrecisionPlugin("fp8").convert_modules(model, inference=True, quant=False, fp8_data_path=...)`` prepares the
   model for measuring; ``trainer.test`` on calibration data records each layer's ranges and writes them under
   ``<fp8_data_path>/inc_output/`` when it ends;
2. ``convert_modules(model, inference=True, quant=True, fp8_data_path=...)`` quantizes it from those measurements:
   INC's layers cast inputs and weights to fp8 and multiply them with the SDK's fp8 matrix product;
   ``trainer.predict`` then runs in fp8.

The script prints the fp8 model's accuracy next to the bf16 model's, how many predictions agree, and the relative
difference of their outputs. Needs the extra: ``pip install 'lightning-accel-habana[fp8-inference]'``.

Run:
    LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/fp8_inference.py --out /tmp/fp8_inference
    LIGHTNING_ACCEL_EMULATE=hpu LIGHTNING_ACCEL_EMULATE_HPU_TYPE=gaudi3 python examples/habana/fp8_inference.py
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.habana import HPUAccelerator, HPUPrecisionPlugin

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class LitClassifier(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(dim=1) == y).float().mean())

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).float()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def trainer(plugin: Any = None, **kwargs: Any) -> Trainer:
    return Trainer(
        accelerator="hpu",
        devices=1,
        plugins=[plugin] if plugin is not None else None,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="fp8_inference_output", help="folder for the fp8 measurements")
    parser.add_argument("--max-epochs", type=int, default=5)
    args = parser.parse_args()

    available, reason = HPUAccelerator.is_fp8_available()
    print(f"device: {HPUAccelerator.get_device_name()}, fp8 available: {available} {reason}")
    if not available:
        return

    torch.manual_seed(0)
    digits = torch.load(DIGITS)
    features, labels = digits["features"], digits["labels"]
    data = TensorDataset(features.float() / 16.0, labels.long())
    train, test = torch.utils.data.random_split(
        data, [1400, len(data) - 1400], generator=torch.Generator().manual_seed(0)
    )
    model = LitClassifier()
    trainer(max_epochs=args.max_epochs).fit(model, DataLoader(train, batch_size=64, shuffle=True))
    test_loader = DataLoader(test, batch_size=128)
    targets = torch.cat([y for _, y in test_loader])

    bf16 = torch.cat(trainer(HPUPrecisionPlugin("bf16-mixed")).predict(copy.deepcopy(model), test_loader)).cpu()

    plugin = HPUPrecisionPlugin("fp8")
    # 1. Measure on calibration data (here: the training set); the measurements are written when test() ends.
    plugin.convert_modules(model, inference=True, quant=False, fp8_data_path=args.out)
    trainer(plugin).test(model, DataLoader(train, batch_size=128), verbose=False)
    written = sorted(p.name for p in (Path(args.out) / "inc_output").iterdir())
    print(f"measurements in {Path(args.out) / 'inc_output'}: {', '.join(written)}")
    # 2. Quantize from them and predict in fp8.
    plugin.convert_modules(model, inference=True, quant=True, fp8_data_path=args.out)
    print("quantized layers:", [type(m).__name__ for m in model.net])
    fp8 = torch.cat(trainer(plugin).predict(model, test_loader)).cpu()

    accuracy = {
        name: float((out.argmax(dim=1) == targets).float().mean()) for name, out in [("bf16", bf16), ("fp8", fp8)]
    }
    agreement = float((fp8.argmax(dim=1) == bf16.argmax(dim=1)).float().mean())
    difference = float((fp8 - bf16).norm() / bf16.norm())
    print(f"test accuracy: bf16 {accuracy['bf16']:.3f}, fp8 {accuracy['fp8']:.3f}")
    print(f"fp8 predictions agreeing with bf16: {agreement:.3f}; relative difference of the outputs: {difference:.4f}")


if __name__ == "__main__":
    main()
