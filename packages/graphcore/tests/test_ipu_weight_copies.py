"""Issue 30, item 6: nothing between two training steps copies the weights from the IPUs to the host.

poptorch copies a training model's weights to the host lazily: a training call marks them dirty
(``_poplar_executor.py:1286-1287``) and the next read of any attribute of a parameter (``.grad``, ``.shape``)
copies every weight (``copyWeightsToHostIfNeeded``, ``:543-553``; ``PoptorchParameter``, ``:319-333``), which costs a
full device-to-host transfer. ``_host_weights_version`` counts the copies (``:573``).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from ipu_models import Linear
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.trainer.states import RunningStage


def test_reading_a_parameter_after_a_training_call_copies_the_weights_once(poptorch: ModuleType) -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:
            out = self.fc(x)
            return out, F.mse_loss(out, y)

    model = Net()
    executor = poptorch.trainingModel(model)
    x, y = torch.randn(2, 3), torch.randn(2, 1)
    for _ in range(3):
        executor(x, y)
    assert executor._host_weights_version == 0  # three calls, nothing read: no copy
    assert model.fc.weight.grad is None  # a read copies the weights ...
    assert model.fc.bias.shape == (1,)  # ... once
    assert executor._host_weights_version == 1
    executor(x, y)
    executor.destroy()
    assert type(model.fc.weight) is torch.nn.Parameter  # destroy() unwraps the parameters


class CopiesBetweenSteps(Callback):
    """Records the host-weights version of the training model after every step."""

    def __init__(self) -> None:
        self.versions: list[int] = []

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        executor = trainer.strategy.poptorch_models[RunningStage.TRAINING]  # type: ignore[attr-defined]
        self.versions.append(executor._host_weights_version)


def test_no_weight_copy_to_the_host_between_steps_in_fit(tmp_path: Path) -> None:
    callback = CopiesBetweenSteps()
    trainer = Trainer(
        accelerator="ipu",
        devices=1,
        max_epochs=2,
        limit_train_batches=6,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[callback],
    )
    trainer.fit(Linear(rows=64, batch_size=2))
    versions = callback.versions
    assert len(versions) == 12
    # Within an epoch the version never moves: zero copies between steps. (At the start of an epoch the strategy
    # copies the host weights to the device, for callbacks that edit them, which reads them once.)
    assert versions[0:6] == [versions[0]] * 6
    assert versions[6:12] == [versions[6]] * 6
    assert versions[6] - versions[5] <= 1
