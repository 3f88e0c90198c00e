"""A process killed while it overwrites a checkpoint leaves the previous checkpoint loadable, for every strategy.

Each case runs a real process that trains, saves a checkpoint, trains on and overwrites it, and is killed by SIGKILL
at a chosen step of the overwrite (in the middle of a file's bytes, or between the renames that swap the new checkpoint
in). A second process then restores the checkpoint and must read back exactly the first checkpoint's weights; or the
second one's, when the kill came after the second checkpoint was completely written and the swap was under way.
The two-device cases kill rank 0 (the process the test started) and then check that rank 1 went too: the rank watch
ends it, and no process of the run is left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch

SCRIPT = Path(__file__).resolve().parent / "scripts" / "kill_mid_save.py"

# (strategy, where the overwrite is killed, whose weights must be read back[, devices])
CASES: list[tuple[str, ...]] = [
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
    # Two processes. DDP: rank 0 writes the file while rank 1 waits in the barrier after it.
    ("hpu_parallel", "write:1", "previous", "2"),
    # DeepSpeed ZeRO-2 on two ranks: each rank writes its own optimizer shard into the staging directory; rank 0 swaps.
    ("hpu_deepspeed_stage_2", "write:1", "previous", "2"),
    ("hpu_deepspeed_stage_2", "swap:2", "new", "2"),
    # FSDP on two ranks: "full" is gathered and written by rank 0; "sharded" has each rank write its own shard.
    ("hpu_fsdp", "write:1", "previous", "2"),
    ("hpu_fsdp:sharded", "write:1", "previous", "2"),
    ("hpu_fsdp:sharded", "swap:2", "new", "2"),
    # Fabric: FSDP's default "sharded" folder and ModelParallelStrategy's distributed checkpoint (FSDP2), both staged
    # and swapped in as the Trainer's are.
    ("fabric:hpu_fsdp", "write:1", "previous"),
    ("fabric:hpu_fsdp", "swap:2", "new"),
    ("fabric:hpu_model_parallel", "write:1", "previous", "2"),
]


def _run(devices: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_ACCEL_")}
    env.update(
        LIGHTNING_ACCEL_EMULATE="hpu,ipu",
        DS_ACCELERATOR="hpu",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        DEVICES=devices,
        LIGHTNING_ACCEL_RANK_WATCH_INTERVAL="0.2",
    )
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


def _processes_running(marker: str) -> list[psutil.Process]:
    """The processes whose command line names ``marker`` (Lightning starts rank 1 with rank 0's command line)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if process.info["cmdline"] and marker in process.info["cmdline"] and process.status() != "zombie":
                found.append(process)
        except psutil.Error:
            continue
    return found


def _case_id(case: tuple[str, ...]) -> str:
    return f"{case[0]}-{case[1]}" + (f"-{case[3]}devices" if len(case) > 3 else "")


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[_case_id(case) for case in CASES])
def test_killed_overwrite_leaves_a_whole_checkpoint(tmp_path: Path, case: tuple[str, ...]) -> None:
    strategy, kill_at, survivor, devices = (*case, "1") if len(case) == 3 else case
    ckpt, good, read_back = tmp_path / "last.ckpt", tmp_path / "good.pt", tmp_path / "read_back.pt"

    saving = _run(devices, "save", strategy, str(ckpt), str(good), kill_at)
    assert saving.returncode == -signal.SIGKILL, saving.stdout[-2000:] + saving.stderr[-4000:]
    assert good.exists()
    # The other rank ends by itself once rank 0 is gone (the timeout bounds the test only).
    left = _processes_running(str(ckpt))
    _, alive = psutil.wait_procs(left, timeout=60)
    assert not alive, f"left behind: {[p.pid for p in alive]}"

    loading = _run(devices, "load", strategy, str(ckpt), str(read_back))
    assert loading.returncode == 0, loading.stdout[-2000:] + loading.stderr[-4000:]
    expected = torch.load(good if survivor == "previous" else f"{good}.new")
    actual = torch.load(read_back)
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=0, msg=name)
