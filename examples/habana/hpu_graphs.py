"""HPU graphs (seed: 'Using HPU Graphs'): capture-and-replay training, ModuleCacher, and graphed prediction.

Run: LIGHTNING_ACCEL_EMULATE=hpu python examples/habana/hpu_graphs.py
HPU graphs exist in the SDK's lazy mode only (PT_HPU_LAZY_MODE=1), which the SDK reads when it loads: this script sets
it before torch (and with it the SDK) is imported, unless the environment already says otherwise.
"""

from __future__ import annotations

import os

os.environ.setdefault("PT_HPU_LAZY_MODE", "1")

from pathlib import Path
from typing import Any

# The SDK's own module, as on Gaudi; with LIGHTNING_ACCEL_EMULATE=hpu this name resolves to the emulated SDK.
import habana_frameworks.torch.core as htcore
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.habana import HPUGraphs

BATCH = 64

# The 8x8 digits, bundled with the examples (examples/README.md says where they come from).
DIGITS = Path(__file__).resolve().parents[1] / "digits.pt"


class HPUGraphsModel(LightningModule):
    """Capture the whole training step (forward, backward, optimizer step) once, then replay it."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        self.g = htcore.hpu.HPUGraph()
        # Static placeholders on the HPU: the graph reads and writes these tensors on every replay.
        self.static_input = torch.zeros(BATCH, 64, device="hpu")
        self.static_target = torch.zeros(BATCH, dtype=torch.long, device="hpu")
        self.static_loss: torch.Tensor | None = None
        self.automatic_optimization = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        data, target = batch
        self.static_input.copy_(data)
        self.static_target.copy_(target)
        if self.static_loss is None:
            optimizer.zero_grad(set_to_none=True)
            with htcore.hpu.graph(self.g):  # capturing also runs this first step
                self.static_loss = F.cross_entropy(self(self.static_input), self.static_target)
                self.static_loss.backward()
                optimizer.step()
        else:
            self.g.replay()  # refreshes static_loss, the gradients and the weights in place
        self.log("train_loss", self.static_loss, prog_bar=True)
        return self.static_loss

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(dim=1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    digits = torch.load(DIGITS)
    features, labels = digits["features"], digits["labels"]
    data = TensorDataset(features.float() / 16.0, labels.long())
    trainer = Trainer(accelerator="hpu", devices=1, max_epochs=5, logger=False, enable_checkpointing=False)
    model = HPUGraphsModel()
    # Static graphs need static shapes: drop the last, smaller batch.
    trainer.fit(model, DataLoader(data, batch_size=BATCH, shuffle=True, drop_last=True))

    # ModuleCacher: one graph per input shape for training forward and backward, for the first max_graphs shapes;
    # later shapes run uncaptured (the 16-row batch here), as on the SDK.
    cached = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    cacher = htcore.hpu.ModuleCacher(max_graphs=2)
    cacher(model=cached, inplace=True)
    optimizer = torch.optim.SGD(cached.parameters(), lr=0.1)
    for size in (32, 64, 32, 16, 64):
        x, y = data.tensors[0][:size], data.tensors[1][:size]
        optimizer.zero_grad()
        F.cross_entropy(cached(x), y).backward()
        optimizer.step()
    print(f"ModuleCacher keeps {len(cacher.model_dict)} graphs; {cacher.uncached_train_hits} step(s) ran uncaptured")

    # Lightning switch: evaluation and prediction forward as HPU graphs, no code change in the model.
    predictions = Trainer(accelerator="hpu", devices=1, logger=False, callbacks=[HPUGraphs()]).predict(
        model, DataLoader(data, batch_size=256)
    )
    assert predictions is not None
    accuracy = (torch.cat(predictions) == data.tensors[1]).float().mean().item()
    print(f"accuracy with graphed prediction: {accuracy:.3f}")


if __name__ == "__main__":
    main()
