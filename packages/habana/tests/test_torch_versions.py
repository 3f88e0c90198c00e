"""The torch versions the package declares, and the warning a run on another torch gets."""

from __future__ import annotations

import pytest
import torch
from _habana_helpers import digits_classifier, digits_loaders
from lightning.pytorch import Trainer

from lightning_accel.habana import _accelerator_common
from lightning_accel.habana.versions import SUPPORTED_TORCH, torch_version_warning


@pytest.mark.parametrize("version", ["2.9.1", "2.10.0a0+git5a1b2c3", "2.11.0+hpu.1.24.1", "2.13.0+cpu"])
def test_a_supported_major_minor_gets_no_warning_whatever_its_build(version: str) -> None:
    assert torch_version_warning(version) is None


def test_another_torch_is_named_with_the_supported_ones() -> None:
    message = torch_version_warning("2.8.0")
    assert message is not None
    assert message.startswith("torch 2.8.0 is not a version lightning-accel-habana is checked against: 2.9.1 (Intel")
    assert all(version in message for version in SUPPORTED_TORCH)


def test_a_run_on_an_unsupported_torch_is_warned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", "2.8.0")
    _accelerator_common._warn_about_torch_once.cache_clear()
    train, val = digits_loaders()
    with pytest.warns(UserWarning, match=r"torch 2\.8\.0 is not a version lightning-accel-habana") as caught:
        for _ in range(2):
            trainer = Trainer(accelerator="hpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False)
            trainer.fit(digits_classifier(), train, val)
    assert sum("torch 2.8.0" in str(w.message) for w in caught) == 1
    _accelerator_common._warn_about_torch_once.cache_clear()
