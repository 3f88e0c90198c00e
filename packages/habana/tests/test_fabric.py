"""Fabric on (emulated) HPUs: one device, and two real processes over HCCL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from _habana_helpers import PYTHON, SCRIPTS, digits_loaders, free_port, script_env
from lightning.fabric import Fabric

from lightning_accel.habana.fabric import HPUAccelerator, HPUCheckpointIO, SingleHPUStrategy


@pytest.mark.emulator_only
def test_single_device_training_converges_and_marks_steps(tmp_path: Path, lazy_mode: None) -> None:
    from lightning_accel.habana_emulator import core as emulated_core  # the emulator's internals

    fabric = Fabric(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy(), devices=1)
    fabric.seed_everything(0)
    assert fabric.device == torch.device("hpu")
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, optimizer = fabric.setup(model, optimizer)
    train, val = fabric.setup_dataloaders(*digits_loaders())
    before = emulated_core._marked_steps()
    steps = 0
    for _ in range(6):
        for x, y in train:
            optimizer.zero_grad()
            fabric.backward(torch.nn.functional.cross_entropy(model(x), y))
            optimizer.step()
            steps += 1
    assert emulated_core._marked_steps() - before == 2 * steps  # after backward and after each optimizer step
    with torch.no_grad():
        correct = sum(int((model(x).argmax(1) == y).sum()) for x, y in val)
    assert correct / len(val.dataset) > 0.85
    assert isinstance(fabric.strategy.checkpoint_io, HPUCheckpointIO)
    fabric.save(tmp_path / "state.ckpt", {"model": model})
    restored = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    restored.load_state_dict(torch.load(tmp_path / "state.ckpt")["model"])
    on_host = {name: value.cpu() for name, value in model.module.state_dict().items()}
    torch.testing.assert_close(restored.state_dict(), on_host)


def test_two_process_all_reduce_and_backward(tmp_path: Path) -> None:
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    done = subprocess.run(
        [PYTHON, str(SCRIPTS / "fabric_ddp.py"), str(tmp_path)], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["backend"] for r in ranks] == ["hccl", "hccl"]
    assert [r["devices"] for r in ranks] == [["hpu", "hpu"]] * 2
    assert [(r["sum"], r["mean"], r["min"]) for r in ranks] == [(3.0, 1.5, 1.0)] * 2
    # DDP averaged the gradients of different inputs, so both ranks made the same update.
    assert ranks[0]["weight"] == ranks[1]["weight"]
