"""A GPU user's ``torch.compile`` script, run with only the accelerator changed: ``--accelerator hpu``.

The model is compiled the way GPU scripts do it, with torch's default backend: the whole model (``--where outer``,
``torch.compile(model)`` handed to the Trainer or to ``fabric.setup``) or a submodule inside it (``--where inner``,
``self.net = torch.compile(net)``). Writes the losses and the warnings of the run to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from _habana_helpers import digits_loaders
from lightning.fabric import Fabric
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything


class Classifier(LightningModule):
    def __init__(self, compile_inside: bool) -> None:
        super().__init__()
        net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
        self.net = torch.compile(net) if compile_inside else net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Losses(Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, *args: Any) -> None:
        self.losses.append(float(outputs["loss"]))


def _trainer_run(args: argparse.Namespace, model: Any, compiled: Any) -> list[float]:
    losses = _Losses()
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        max_epochs=1,
        limit_train_batches=8,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[losses],
    )
    trainer.fit(compiled, digits_loaders()[0])
    return losses.losses


def _fabric_run(args: argparse.Namespace, model: Any, compiled: Any) -> list[float]:
    fabric = Fabric(accelerator=args.accelerator, devices=args.devices)
    fabric.launch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled, optimizer = fabric.setup(compiled, optimizer)
    losses = []
    for step, (x, y) in enumerate(fabric.setup_dataloaders(digits_loaders()[0])):
        if step == 8:
            break
        loss = torch.nn.functional.cross_entropy(compiled(x), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
    return losses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--accelerator", default="cuda")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--api", choices=["trainer", "fabric"], default="trainer")
    parser.add_argument("--where", choices=["outer", "inner", "none"], default="outer")
    args = parser.parse_args()
    seed_everything(5)
    model = Classifier(compile_inside=args.where == "inner")
    compiled = torch.compile(model) if args.where == "outer" else model
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = (_trainer_run if args.api == "trainer" else _fabric_run)(args, model, compiled)
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    record = {
        "losses": losses,
        "warnings": [str(w.message) for w in caught if "hpu_backend" in str(w.message)],
        "frames_compiled": torch._dynamo.utils.counters["stats"]["unique_graphs"],
        # hpu_backend goes through AOT autograd; Dynamo's "eager" backend would not.
        "aot_autograd_graphs": torch._dynamo.utils.counters["aot_autograd"]["total"],
    }
    (args.out / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
