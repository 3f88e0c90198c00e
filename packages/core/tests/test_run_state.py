"""The run's note: readable by every rank that joined, nameless once they all have, swept when its run is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_accel.core.run_state import PREFIX, RunState, sweep_stale_run_states


@pytest.fixture(autouse=True)
def _own_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))


def _notes(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"{PREFIX}*"))


def test_the_name_goes_when_the_last_launched_rank_joins_and_the_ranks_still_read_the_note(tmp_path: Path) -> None:
    first = RunState.create(expected_ranks=2)
    assert _notes(tmp_path) == [Path(first.path)]
    one = RunState.join(first.path)
    assert one is not None and first.named  # one of two joined: the other still needs the name
    two = RunState.join(first.path)
    assert two is not None and not first.named and _notes(tmp_path) == []
    first.write("failed: RuntimeError: it broke")
    assert one.read() == two.read() == "failed: RuntimeError: it broke"
    first.write("done")  # a shorter state replaces a longer one whole
    assert one.read() == "done"
    for note in (first, one, two):
        note.close()


def test_without_launched_ranks_the_note_never_has_a_name(tmp_path: Path) -> None:
    note = RunState.create(expected_ranks=0)
    assert _notes(tmp_path) == []
    note.write("running")
    assert note.read() == "running"
    note.close()


def test_joining_a_note_that_is_gone_gives_none(tmp_path: Path) -> None:
    assert RunState.join(str(tmp_path / f"{PREFIX}1-x.state")) is None


def test_the_first_process_removes_the_name_of_a_note_some_rank_never_joined(tmp_path: Path) -> None:
    note = RunState.create(expected_ranks=3)
    note.remove()
    assert _notes(tmp_path) == [] and note.read() == ""


def test_the_next_run_sweeps_the_notes_of_first_processes_that_no_longer_exist(tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"{PREFIX}{int(ended.stdout)}-abc.state"
    alive = tmp_path / f"{PREFIX}{os.getpid()}-def.state"
    foreign = tmp_path / f"{PREFIX}notapid.state"
    for path in (dead, alive, foreign):
        path.write_text("running")
    assert sweep_stale_run_states(str(tmp_path)) == [dead]
    assert _notes(tmp_path) == sorted([alive, foreign])
    # A new run sweeps before it writes its own note.
    dead.write_text("running")
    RunState.create(expected_ranks=0).close()
    assert not dead.exists()
