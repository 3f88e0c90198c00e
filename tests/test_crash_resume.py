"""A two-device run killed mid-epoch and resumed from its last checkpoint ends with the weights of an uninterrupted run.

Each case runs three real runs: an uninterrupted one, one killed by SIGKILL in the middle of the third epoch, and one
resumed from the last checkpoint (end of the second epoch). On two HPUs (two processes) rank 1 is killed and the rank
watch ends rank 0; the IPU strategy's two replicas live in one process, which is killed. Training is deterministic here
(fixed data order, no dropout), so the weights must be equal exactly.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent / "scripts" / "crash_resume.py"


def _run(strategy: str, out: Path, mode: str) -> subprocess.CompletedProcess[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_ACCEL_")}
    env.update(
        LIGHTNING_ACCEL_EMULATE="hpu,ipu",
        DS_ACCELERATOR="hpu",
        OMP_NUM_THREADS="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        LIGHTNING_ACCEL_RANK_WATCH_INTERVAL="0.2",
    )
    return subprocess.run(
        [sys.executable, str(SCRIPT), strategy, str(out), mode], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["hpu_parallel", "hpu_deepspeed_stage_2", "hpu_deepspeed_stage_3", "ipu_strategy"])
def test_killed_and_resumed_equals_uninterrupted(tmp_path: Path, strategy: str) -> None:
    whole = _run(strategy, tmp_path / "whole", "whole")
    assert whole.returncode == 0, whole.stderr[-4000:]

    crashed = _run(strategy, tmp_path / "run", "crash")
    if strategy == "ipu_strategy":
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-4000:]
    else:
        assert crashed.returncode == 128 + signal.SIGKILL, crashed.stderr[-4000:]
        assert "lightning-accel: rank 1" in crashed.stderr and "was killed by SIGKILL" in crashed.stderr

    resumed = _run(strategy, tmp_path / "run", "resume")
    assert resumed.returncode == 0, resumed.stderr[-4000:]

    whole_run, resumed_run = torch.load(tmp_path / "whole" / "whole.pt"), torch.load(tmp_path / "run" / "resume.pt")
    # The resumed run trained the last two epochs only (4 steps each): it did start from the checkpoint.
    assert (whole_run["steps_run"], resumed_run["steps_run"]) == (16, 8)
    expected, actual = whole_run["weights"], resumed_run["weights"]
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=0, msg=name)
