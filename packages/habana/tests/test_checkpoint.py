"""HPUCheckpointIO: host tensors, atomic writes that survive a failing save, and exact resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from _habana_helpers import digits_classifier, digits_loaders
from lightning.pytorch import Trainer, seed_everything

from lightning_accel.habana import HPUAccelerator, HPUCheckpointIO, SingleHPUStrategy

QUIET: dict[str, Any] = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False}


class _ExplodesWhenPickled:
    def __reduce__(self) -> Any:
        raise RuntimeError("pickling failed half-way through the checkpoint")


def test_failed_save_leaves_the_previous_checkpoint_intact(tmp_path: Path) -> None:
    io = HPUCheckpointIO()
    target = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1, "weights": torch.arange(1000.0)}, target)
    good = target.read_bytes()
    # A large tensor is written before the object that fails, so the temporary file really is half-written.
    broken = {"step": 2, "weights": torch.zeros(1_000_000), "z_bad": _ExplodesWhenPickled()}
    with pytest.raises(RuntimeError, match="pickling failed half-way"):
        io.save_checkpoint(broken, target)
    assert target.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # no temporary file left behind
    loaded = io.load_checkpoint(target)
    assert loaded["step"] == 1
    assert torch.equal(loaded["weights"], torch.arange(1000.0))


def test_storage_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"storage_options=\{'a': 1\}\)` is not supported by `HPUCheckpointIO`"):
        HPUCheckpointIO().save_checkpoint({}, tmp_path / "x.ckpt", storage_options={"a": 1})


def test_hpu_strategies_use_it_by_default() -> None:
    assert isinstance(SingleHPUStrategy().checkpoint_io, HPUCheckpointIO)


def _trainer(tmp_path: Path, max_epochs: int) -> Trainer:
    return Trainer(
        accelerator=HPUAccelerator(),
        strategy=SingleHPUStrategy(),
        max_epochs=max_epochs,
        default_root_dir=tmp_path,
        num_sanity_val_steps=0,
        enable_checkpointing=True,
        deterministic=True,
        **QUIET,
    )


def test_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    seed_everything(7, workers=True)
    straight = digits_classifier()
    train, val = digits_loaders()
    _trainer(tmp_path / "straight", 4).fit(straight, train, val)

    seed_everything(7, workers=True)
    first = digits_classifier()
    train, val = digits_loaders()
    interrupted = _trainer(tmp_path / "resumed", 2)
    interrupted.fit(first, train, val)
    checkpoint = tmp_path / "resumed" / "half.ckpt"
    interrupted.save_checkpoint(checkpoint)
    saved = torch.load(checkpoint, weights_only=False)
    assert all(t.device.type == "cpu" for t in saved["state_dict"].values())

    resumed_model = digits_classifier()
    _trainer(tmp_path / "resumed", 4).fit(resumed_model, train, val, ckpt_path=checkpoint)
    for (name, expected), actual in zip(
        straight.state_dict().items(), resumed_model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, msg=f"{name} differs after resume")
