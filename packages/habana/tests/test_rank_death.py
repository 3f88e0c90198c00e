"""A rank of a two-HPU run dies by SIGKILL: the run stops, says which rank died and how, and leaves no process.

However a run ends, it leaves nothing in the temporary folder (the note through which rank 0 tells the launched ranks
how its run ended, ``lightning_accel.core.run_state``).
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from _habana_helpers import PYTHON, SCRIPTS, free_port, script_env


def _run_script(pid_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/<args>`` on two emulated HPUs, with the temporary folder ``pid_dir/temporary``."""
    (pid_dir / "temporary").mkdir()
    env = script_env(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        LIGHTNING_ACCEL_RANK_WATCH_INTERVAL="0.2",
        TMPDIR=str(pid_dir / "temporary"),
    )
    # The timeout bounds the test only: without the watchers a surviving rank would wait in a collective.
    return subprocess.run(
        [PYTHON, str(SCRIPTS / args[0]), *args[1:]], env=env, capture_output=True, text=True, timeout=240
    )


def _run_until_a_rank_dies(dead_rank: int, pid_dir: Path) -> subprocess.CompletedProcess[str]:
    return _run_script(pid_dir, "rank_dies.py", str(dead_rank), str(pid_dir))


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
    assert not list((tmp_path / "temporary").glob("lightning-accel-*"))  # nobody was left to remove it at exit


def _run_that_ends(how: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return _run_script(tmp_path, "run_ends.py", how)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["slow-rank", "os-exit"])
def test_a_run_that_ends_well_leaves_nothing_in_the_temporary_folder(how: str, tmp_path: Path) -> None:
    # slow-rank: rank 0 leaves 8 s before rank 1; os-exit: no process runs its exit handlers.
    done = _run_that_ends(how, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert not list((tmp_path / "temporary").glob("lightning-accel-*"))


@pytest.mark.slow
def test_a_run_stopped_by_ctrl_c_leaves_nothing_in_the_temporary_folder(tmp_path: Path) -> None:
    # SIGINT: Lightning tears the run down, kills the launched ranks and exits with 1. (Not SIGTERM: Lightning 2.6's
    # SIGTERM handler broadcasts over the process group from inside the signal handler, which can hang a run in the
    # middle of a collective, without any code of ours.)
    done = _run_that_ends("sigint", tmp_path)
    assert done.returncode == 1, done.stderr[-4000:]
    assert "Detected KeyboardInterrupt, attempting graceful shutdown" in done.stdout + done.stderr
    assert not list((tmp_path / "temporary").glob("lightning-accel-*"))


@pytest.mark.slow
def test_a_callback_error_on_rank_0_reaches_rank_1_and_leaves_nothing_behind(tmp_path: Path) -> None:
    done = _run_that_ends("callback-error", tmp_path)
    assert done.returncode == 1, done.stderr[-4000:]
    # Rank 1 reads how rank 0 stopped from the note after its name is gone (every rank holds it open).
    assert "stopped with RuntimeError: a callback failed on rank 0; rank 1 stops too." in done.stderr, done.stderr[
        -4000:
    ]
    assert not list((tmp_path / "temporary").glob("lightning-accel-*"))
