"""The note through which the first process of a multi-process run tells its launched ranks how its run ended.

A launched rank needs it only once the first process is gone (see :mod:`lightning_accel.core.rank_watch`), so it
must outlive that process, yet it must never outlive the run: a run that ends in any way, a rank finishing first, an
``os._exit``, a signal or an error, leaves nothing in the temporary folder. Each launched rank therefore *joins* the
note when its set-up starts, opening it and counting itself in; the rank that completes the count removes the file's
name. From then on every process of the run reads and writes the note through the descriptor it holds, which the
system frees with the process, however the process ends.

Before every rank has joined, the name is removed by the first process when its launched ranks have all ended, by the
last rank to leave (a rank whose run failed before its set-up counts itself in as it leaves), and otherwise, for a run
whose every process was killed, by the next run on this machine, which removes the notes of first processes that no
longer exist.

The file starts with a header of two 8-digit counts, the ranks expected and the ranks joined, and holds the state
text after it. Every read and write of it is under an ``flock`` of the whole file (where the system has one).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; the ranks of one machine rarely join at the same moment.
    fcntl = None  # type: ignore[assignment]

__all__ = ["PREFIX", "RunState", "sweep_stale_run_states"]

PREFIX = "lightning-accel-run-"
_SUFFIX = ".state"
_HEADER = 16  # two counts of 8 digits: the ranks expected, the ranks joined
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-[^/]+" + re.escape(_SUFFIX) + "$")


@contextlib.contextmanager
def _locked(fd: int, exclusive: bool = True) -> Iterator[None]:
    if fcntl is None:
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class RunState:
    """One process's handle on its run's note: the first process creates it, each launched rank joins it.

    Example:
        >>> note = RunState.create(expected_ranks=0)  # no launched rank: the name is removed at once
        >>> note.write("running")
        >>> note.read()
        'running'
        >>> note.close()
    """

    def __init__(self, fd: int, path: str) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def create(cls, expected_ranks: int) -> RunState:
        """In the first process, before it launches ``expected_ranks`` ranks: a new note in the temporary folder."""
        sweep_stale_run_states()
        fd, path = tempfile.mkstemp(prefix=f"{PREFIX}{os.getpid()}-", suffix=_SUFFIX)
        os.pwrite(fd, b"%08d%08d" % (expected_ranks, 0), 0)
        if expected_ranks <= 0:
            _unlink(path)
        return cls(fd, path)

    @classmethod
    def join(cls, path: str) -> RunState | None:
        """In a launched rank: open the note and count this rank in; None when it is gone already."""
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return None
        note = cls(fd, path)
        note._count_in()
        return note

    def _count_in(self) -> None:
        assert self._fd is not None
        with _locked(self._fd):
            header = os.pread(self._fd, _HEADER, 0)
            expected, joined = (int(header[:8] or 0), int(header[8:] or 0)) if len(header) == _HEADER else (0, 0)
            joined += 1
            os.pwrite(self._fd, b"%08d%08d" % (expected, joined), 0)
            if joined >= expected:
                # Every rank holds the note now: nobody needs its name.
                _unlink(self.path)

    @property
    def named(self) -> bool:
        """Whether the note still has its name in the temporary folder (some launched rank has not joined)."""
        return os.path.exists(self.path)

    def write(self, state: str) -> None:
        """Record ``state`` (the first process): ``running``, ``done`` or ``failed: <error>``."""
        if self._fd is None:
            return
        with _locked(self._fd):
            os.ftruncate(self._fd, _HEADER)
            os.pwrite(self._fd, state.encode(), _HEADER)

    def read(self) -> str:
        """The state the first process recorded last; empty when none (or the note is closed)."""
        if self._fd is None:
            return ""
        with _locked(self._fd, exclusive=False):
            size = os.fstat(self._fd).st_size
            return os.pread(self._fd, max(size - _HEADER, 0), _HEADER).decode(errors="replace").strip()

    def remove(self) -> None:
        """Remove the note's name (the first process, once its launched ranks have ended), then close it."""
        _unlink(self.path)
        self.close()

    def close(self) -> None:
        """Let go of the note; the name is left to the rules of the module's docstring."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


def sweep_stale_run_states(directory: str | None = None) -> list[Path]:
    """Remove the notes of runs whose first process no longer exists (a run whose every process was killed).

    Returns:
        The paths removed.
    """
    removed = []
    folder = Path(directory or tempfile.gettempdir())
    for path in folder.glob(f"{PREFIX}*{_SUFFIX}"):
        match = _NAME.match(path.name)
        if match is None or _process_exists(int(match.group(1))):
            continue
        _unlink(str(path))
        removed.append(path)
    return removed
