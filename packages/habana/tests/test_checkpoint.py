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


class _OnHPU(torch.Tensor):
    """A tensor that reports an HPU as its device, as tensors on Gaudi do; ``.cpu()`` / ``.to()`` give host tensors.

    On the CPU-backed emulator every tensor is already on the host, so only a tensor that says otherwise shows
    whether the checkpoint I/O moves tensors before writing.
    """

    @property  # type: ignore[override]
    def device(self) -> torch.device:
        return torch.device("hpu", 0)

    def cpu(self, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        return self.as_subclass(torch.Tensor).clone()

    def to(self, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        return self.as_subclass(torch.Tensor).clone().to(*args, **kwargs)


def test_tensors_on_the_device_are_written_as_host_tensors(tmp_path: Path) -> None:
    weight = torch.arange(6.0).reshape(2, 3).as_subclass(_OnHPU)
    assert weight.device.type == "hpu"
    target = tmp_path / "device.ckpt"
    HPUCheckpointIO().save_checkpoint({"state_dict": {"w": weight}, "optimizer_states": [{"m": [weight]}]}, target)
    # weights_only=True refuses anything but plain tensors: a device tensor written as it was would not load.
    loaded = torch.load(target, weights_only=True)
    for tensor in (loaded["state_dict"]["w"], loaded["optimizer_states"][0]["m"][0]):
        assert type(tensor) is torch.Tensor and tensor.device.type == "cpu"
        assert torch.equal(tensor, torch.arange(6.0).reshape(2, 3))


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

    resumed_model = digits_classifier()
    _trainer(tmp_path / "resumed", 4).fit(resumed_model, train, val, ckpt_path=checkpoint)
    for (name, expected), actual in zip(
        straight.state_dict().items(), resumed_model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, msg=f"{name} differs after resume")
