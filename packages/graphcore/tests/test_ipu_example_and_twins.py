"""The example script and the pytorch_lightning twin tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "graphcore" / "train_digits.py"


def test_example_trains_digits_on_emulated_ipus() -> None:
    env = {**os.environ, "LIGHTNING_ACCEL_EMULATE": "ipu", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--devices", "2", "--device-iterations", "2", "--max-epochs", "10"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(line for line in result.stdout.splitlines() if line.startswith("final validation accuracy:"))
    assert float(line.split(":")[1]) > 0.85


def test_pytorch_lightning_trainer_uses_the_twin_classes() -> None:
    import pytorch_lightning as pl  # installed with lightning 2.x; the twins must register into it

    assert "ipu" in pl.accelerators.AcceleratorRegistry, "the IPU plugin is not registered in pytorch_lightning"

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return F.cross_entropy(self.fc(batch[0]), batch[1])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    x = torch.randn(32, 4)
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=2)
    trainer = pl.Trainer(accelerator="ipu", devices=2, max_epochs=1, logger=False, enable_checkpointing=False)
    trainer.fit(Module(), loader)
    assert type(trainer.strategy).__name__ == "IPUStrategy"
    assert isinstance(trainer.strategy, pl.strategies.ParallelStrategy)
    assert trainer.global_step == 8
