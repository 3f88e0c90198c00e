"""A user's ``poptorch.DataLoader(mode=DataLoaderMode.Async)`` in ``Trainer.fit``.

Lightning fetches batch k+1 before it runs step k (so it knows which batch is the last). poptorch's asynchronous
accessor hands out views of a ring buffer and refills a slot as soon as the next batch is fetched (poptorch 3.4
``python/_dataloader.py``), so the batch of step k would already hold a later batch's samples. The strategy copies
each asynchronous batch out of the ring as it is fetched.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer


class RecordsSamples(Callback):
    """The samples of the batch each training step gets (the same tensors the compiled model is called with)."""

    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self.seen.append(batch[1].tolist())


class TrainsOn(LightningModule):
    def __init__(self, loader: Any) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.loader = loader

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, _ = batch
        return self.layer(x).pow(2).mean()

    def train_dataloader(self) -> Any:
        return self.loader

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Stream(torch.utils.data.IterableDataset):
    """Samples without a length: Lightning then fetches one batch ahead to find the last one."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __iter__(self) -> Any:
        for row in range(self.rows):
            yield torch.tensor([float(row)]), torch.tensor(row)


@pytest.mark.parametrize("buffer_size", [2, 3])
@pytest.mark.parametrize("sized", [True, False], ids=["dataset", "stream"])
def test_each_step_trains_on_its_own_batch_with_an_async_loader(
    tmp_path: Path, poptorch: ModuleType, buffer_size: int, sized: bool
) -> None:
    rows = 16
    dataset: Any = (
        torch.utils.data.TensorDataset(torch.arange(float(rows)).reshape(rows, 1), torch.arange(rows))
        if sized
        else Stream(rows)
    )
    opts = poptorch.Options().deviceIterations(2)
    loader = poptorch.DataLoader(
        opts,
        dataset,
        batch_size=1,
        mode=poptorch.DataLoaderMode.Async,
        async_options={"buffer_size": buffer_size},
    )
    recorder = RecordsSamples()
    trainer = Trainer(
        accelerator="ipu",
        devices=1,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[recorder],
    )
    trainer.fit(TrainsOn(loader))
    one_epoch = [[2 * step, 2 * step + 1] for step in range(rows // 2)]
    assert recorder.seen == one_epoch + one_epoch
