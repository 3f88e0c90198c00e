"""A process killed while it overwrites a checkpoint leaves the previous checkpoint loadable, for every strategy.

Each case runs a real process that trains, saves a checkpoint, trains on and overwrites it, and is killed by SIGKILL
at a chosen step of the overwrite (in the middle of a file's bytes, or between the renames that swap the new checkpoint
in). A second process then restores the checkpoint and must read back exactly the first checkpoint's weights; or the
second one's, when the kill came after the second checkpoint was completely written and the swap was under way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent / "scripts" / "kill_mid_save.py"

# (strategy, where the overwrite is killed, whose weights must be read back)
CASES = [
    # HPUCheckpointIO: one torch.save into a temporary file, then os.replace over the target.
    ("hpu_single", "write:1", "previous"),
    ("hpu_single", "replace:1", "previous"),
    # DeepSpeed (ZeRO-2, one device): a directory of a model-states and an optimizer-states file and the `latest` tag,
    # written into a staging directory and swapped in by two renames (target aside, staging in; swap:2 is between).
    ("hpu_deepspeed_stage_2", "write:1", "previous"),
    ("hpu_deepspeed_stage_2", "write:2", "previous"),
    ("hpu_deepspeed_stage_2", "swap:2", "new"),
    # FSDP, one device: "full" goes through HPUCheckpointIO into the staging path; "sharded" is a folder written by
    # torch.distributed.checkpoint. Both are swapped in like DeepSpeed's.
    ("hpu_fsdp", "write:1", "previous"),
    ("hpu_fsdp:sharded", "write:1", "previous"),
    ("hpu_fsdp:sharded", "swap:2", "new"),
    # IPUStrategy: Lightning's checkpoint I/O, serialised in memory and written through an fsspec transaction.
    ("ipu_strategy", "write:1", "previous"),
]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_ACCEL_")}
    env.update(LIGHTNING_ACCEL_EMULATE="hpu,ipu", DS_ACCELERATOR="hpu", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize(("strategy", "kill_at", "survivor"), CASES, ids=[f"{s}-{k}" for s, k, _ in CASES])
def test_killed_overwrite_leaves_a_whole_checkpoint(tmp_path: Path, strategy: str, kill_at: str, survivor: str) -> None:
    ckpt, good, read_back = tmp_path / "last.ckpt", tmp_path / "good.pt", tmp_path / "read_back.pt"

    saving = _run("save", strategy, str(ckpt), str(good), kill_at)
    assert saving.returncode == -signal.SIGKILL, saving.stdout[-2000:] + saving.stderr[-4000:]
    assert good.exists()

    loading = _run("load", strategy, str(ckpt), str(read_back))
    assert loading.returncode == 0, loading.stdout[-2000:] + loading.stderr[-4000:]
    expected = torch.load(good if survivor == "previous" else f"{good}.new")
    actual = torch.load(read_back)
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=0, msg=name)
