"""IPUAccelerator and IPUPrecision: device counts, availability and precision names."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from ipu_models import Linear, blobs
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.pycompat import strict_zip
from lightning_accel.graphcore import IPUAccelerator, IPUPrecision, IPUStrategy


@pytest.mark.parametrize(("devices", "expected"), [(1, 1), (2, 2), (8, 8), ("4", 4), ("auto", 8), (-1, 8)])
def test_accepted_device_counts(devices: Any, expected: int) -> None:
    assert IPUAccelerator.parse_devices(devices) == expected


@pytest.mark.parametrize(
    ("devices", "match"),
    [
        (3, r"devices=3\) is not accepted.*powers of two.*Accepted on this system: 1, 2, 4, 8.*devices=2"),
        (0, r"devices=0\) is not accepted"),
        (16, r"devices=16\) asks for 16 IPUs but 8 are available.*LIGHTNING_ACCEL_EMULATED_DEVICES"),
        ([0, 1], r"devices=\[0, 1\]\) is not accepted.*not by id"),
        ("many", r"devices='many'\) is not accepted"),
        (True, r"devices=True\) is not accepted"),
    ],
)
def test_refused_device_counts(devices: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        IPUAccelerator.parse_devices(devices)


def test_auto_follows_the_emulated_system(emulated_ipus: Callable[[int], None]) -> None:
    emulated_ipus(6)
    assert IPUAccelerator.auto_device_count() == 4
    assert IPUAccelerator.get_parallel_devices(2) == [torch.device("ipu", 0), torch.device("ipu", 1)]
    assert IPUAccelerator().get_device_stats(torch.device("cpu")) == {"ipus_available": 6}


@pytest.mark.parametrize(
    ("given", "canonical"), [(32, "32-true"), ("16", "16-mixed"), (16, "16-mixed"), ("16-true", "16-true")]
)
def test_precision_names(given: Any, canonical: str) -> None:
    assert IPUPrecision(given).precision == canonical


def test_unknown_precision() -> None:
    with pytest.raises(
        ConfigurationError, match=r"precision='bf16-mixed' is not supported on IPUs. Accepted: '32-true'"
    ):
        IPUPrecision("bf16-mixed")


def test_validation_between_training_steps_keeps_the_device_optimizer_state(tmp_path: Path) -> None:
    """Validation detaches the training model and re-attaches it: momentum must survive the round trip."""

    class Momentum(Linear):
        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

        def train_dataloader(self) -> DataLoader[Any]:
            return DataLoader(blobs(self.rows), batch_size=self.batch_size, shuffle=False)

    def fit(model: Momentum, **kwargs: Any) -> None:
        Trainer(
            accelerator=IPUAccelerator(),
            strategy=IPUStrategy(),
            devices=2,
            max_epochs=1,
            limit_train_batches=6,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            **kwargs,
        ).fit(model)

    torch.manual_seed(0)
    with_validation = Momentum(rows=64)
    without_validation = copy.deepcopy(with_validation)
    fit(with_validation, val_check_interval=1, limit_val_batches=1, num_sanity_val_steps=0)
    fit(without_validation, limit_val_batches=0)
    for a, b in strict_zip(with_validation.parameters(), without_validation.parameters()):
        torch.testing.assert_close(a, b)
