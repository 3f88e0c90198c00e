"""A rank of a two-HPU run dies by SIGKILL: the run stops, says which rank died and how, and leaves no process."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from _habana_helpers import PYTHON, SCRIPTS, free_port, script_env


def _run_until_a_rank_dies(dead_rank: int, pid_dir: Path) -> subprocess.CompletedProcess[str]:
    (pid_dir / "temporary").mkdir()
    env = script_env(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        LIGHTNING_ACCEL_RANK_WATCH_INTERVAL="0.2",
        TMPDIR=str(pid_dir / "temporary"),
    )
    # The timeout bounds the test only: without the watchers the surviving rank would wait in a collective.
    return subprocess.run(
        [PYTHON, str(SCRIPTS / "rank_dies.py"), str(dead_rank), str(pid_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _still_running(pid: int) -> bool:
    """Whether ``pid`` still runs after a grace period: its pipes close a moment before the process is gone."""
    try:
        process = psutil.Process(pid)
        process.wait(timeout=30)
    except psutil.NoSuchProcess:
        return False
    except psutil.TimeoutExpired:
        pass
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_a_launched_rank_that_dies_is_named_and_the_run_stops(tmp_path: Path) -> None:
    done = _run_until_a_rank_dies(1, tmp_path)
    pid = int((tmp_path / "rank1.pid").read_text())
    assert f"lightning-accel: rank 1 (pid {pid}) was killed by SIGKILL (signal 9); stopping the other ranks" in (
        done.stderr
    ), done.stderr[-4000:]
    # The first process exits with the dead rank's status, as a shell reports a signal.
    assert done.returncode == 128 + signal.SIGKILL
    assert not _still_running(int((tmp_path / "rank0.pid").read_text()))
    assert not list((tmp_path / "temporary").glob("lightning-accel-*"))  # the run's state file is removed


@pytest.mark.slow
def test_when_the_first_process_dies_the_launched_rank_says_so_and_stops(tmp_path: Path) -> None:
    done = _run_until_a_rank_dies(0, tmp_path)
    assert done.returncode == -signal.SIGKILL
    rank0 = int((tmp_path / "rank0.pid").read_text())
    assert (
        f"lightning-accel: rank 0 (pid {rank0}, the process that started this run) is gone (it was killed, or exited "
        "before its teardown); rank 1 stops too." in done.stderr
    ), done.stderr[-4000:]
    assert not _still_running(int((tmp_path / "rank1.pid").read_text()))
