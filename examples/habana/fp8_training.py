"""fp8 training on Gaudi2 and later with the SDK's Transformer Engine.

``HPUPrecisionPlugin(precision="fp8").convert_modules(model, replace_layers=True)`` swaps the model's
``torch.nn.Linear`` layers for ``transformer_engine.Linear``; the steps run under ``fp8_autocast`` with a delayed
scaling recipe. The script compares the fp8 forward with the float32 and bf16-mixed ones, then trains in fp8 and
prints the validation accuracy.

Run:
    LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/fp8_training.py
    LIGHTNING_ACCEL_EMULATE=hpu LIGHTNING_ACCEL_EMULATE_HPU_TYPE=gaudi3 python examples/habana/fp8_training.py
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.habana import HPUAccelerator, HPUPrecisionPlugin, sdk

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
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self(x).argmax(dim=1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    return float((out.detach().float() - reference).norm() / reference.norm())


def main() -> None:
    available, reason = HPUAccelerator.is_fp8_available()
    print(f"device: {HPUAccelerator.get_device_name()}, fp8 available: {available} {reason}")
    if not available:
        return

    te = sdk.transformer_engine_module()
    recipe = te.recipe.DelayedScaling(fp8_format=te.recipe.Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
    torch.manual_seed(0)
    model = LitClassifier()
    digits = torch.load(DIGITS)
    features, labels = digits["features"], digits["labels"]
    x = features.float() / 16.0
    y = labels.long()

    # How far each precision's forward is from float32's (a second fp8 forward uses the scales the first measured).
    batch = x[:512].to("hpu")
    reference_model = copy.deepcopy(model).to("hpu")
    reference = reference_model(batch).detach()
    with HPUPrecisionPlugin("bf16-mixed").forward_context():
        bf16 = reference_model(batch)
    fp8_plugin = HPUPrecisionPlugin("fp8")
    probe = fp8_plugin.convert_modules(copy.deepcopy(reference_model), replace_layers=True, recipe=recipe)
    with fp8_plugin.forward_context():
        probe(batch)
        fp8 = probe(batch)
    print(
        f"relative error against float32: fp8 {relative_error(fp8, reference):.4f}, bf16-mixed "
        f"{relative_error(bf16, reference):.4f}"
    )

    plugin = HPUPrecisionPlugin("fp8")
    plugin.convert_modules(model, replace_layers=True, recipe=recipe)
    print("Transformer Engine layers:", sum(isinstance(m, te.Linear) for m in model.modules()))
    data = TensorDataset(x, y)
    train, val = torch.utils.data.random_split(
        data, [1400, len(data) - 1400], generator=torch.Generator().manual_seed(0)
    )
    trainer = Trainer(
        accelerator="hpu", devices=1, max_epochs=5, plugins=[plugin], logger=False, enable_checkpointing=False
    )
    trainer.fit(model, DataLoader(train, batch_size=64, shuffle=True), DataLoader(val, batch_size=256))
    scales = model.net[0].fp8_meta["scaling_fwd"].scale.tolist()
    print(f"first layer's forward scales (input, weight): {scales}")
    print(f"validation accuracy in fp8: {float(trainer.callback_metrics['val_acc']):.3f}")


if __name__ == "__main__":
    main()
