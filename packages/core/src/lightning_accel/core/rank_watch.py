"""Stop a multi-process run when one of its ranks dies, and say which rank died and how.

When Lightning starts the ranks of a run itself (``devices=N`` without ``torchrun``, SLURM or MPI), the first
process launches the others as subprocesses. Lightning's own observer notices a dead subprocess within 5 seconds and
kills every process of the run with SIGKILL, logging why only at INFO level, so the user sees rank 0 die of SIGKILL
and nothing that names the rank that failed. When the first process dies, the others wait in their next collective
until the transport notices ("Connection reset by peer"), again without a name.

Strategies that use :func:`watch_ranks` get instead, on standard error:

- in the first process, when a launched rank ends with a non-zero status: which rank (global), its pid and its exit
  code or signal; the other launched ranks are killed and the first process exits with that rank's status
  (``128 + signal`` for a signal, as a shell reports it);
- in a launched rank, when the first process is gone before the run ended: that rank 0 is gone and, if it got as far
  as its teardown, the error it stopped with; the rank then exits with status 1.

Both watchers look every ``LIGHTNING_ACCEL_RANK_WATCH_INTERVAL`` seconds (default 1). Ranks started by an external
launcher (``torchrun``, SLURM, MPI) are that launcher's to watch; nothing is started for them. How the first process's
run ended reaches the launched ranks through a :class:`~lightning_accel.core.run_state.RunState` note, which no way
of ending a run leaves behind.
"""

from __future__ import annotations

import atexit
import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.run_state import RunState

__all__ = ["INTERVAL_VARIABLE", "describe_status", "finish_run", "start_run", "watch_interval", "watch_ranks"]

INTERVAL_VARIABLE = "LIGHTNING_ACCEL_RANK_WATCH_INTERVAL"
_DEFAULT_INTERVAL = 1.0
# Set by the first process for the ranks it launches: its pid, and the path of its run's note.
_LAUNCHER_PID = "LIGHTNING_ACCEL_LAUNCHER_PID"
_RUN_STATE = "LIGHTNING_ACCEL_RUN_STATE"

_watching_launcher: _LauncherWatcher | None = None
_watching_children: _ChildWatcher | None = None
_run_state: RunState | None = None  # the first process's note, or a launched rank's once it joined


def watch_interval() -> float:
    """Seconds between two looks of the rank watchers: ``LIGHTNING_ACCEL_RANK_WATCH_INTERVAL``, default 1.

    Raises:
        ConfigurationError: When the variable is not a positive number.
    """
    raw = os.environ.get(INTERVAL_VARIABLE, "").strip()
    if not raw:
        return _DEFAULT_INTERVAL
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ConfigurationError(
            f"{INTERVAL_VARIABLE}={raw!r} is not a number of seconds. Accepted: a positive number such as 0.5 or 2 "
            f"(default {_DEFAULT_INTERVAL:g}). Fix: set it to a positive number, or unset it."
        )
    return value


def describe_status(returncode: int) -> str:
    """How a process ended: ``"exited with code 3"``, ``"was killed by SIGKILL (signal 9)"``."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "an unknown signal"
    return f"was killed by {name} (signal {number})"


def _shell_status(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode


class _ChildWatcher(threading.Thread):
    """In the first process: polls the launched ranks; ends the run when one ends with a non-zero status."""

    def __init__(self, procs: Sequence[subprocess.Popen[Any]], first_rank: int, interval: float) -> None:
        super().__init__(daemon=True, name="lightning-accel-rank-watch")
        self._procs = list(procs)
        self._first_rank = first_rank  # the global rank of procs[0]
        self.interval = interval

    def run(self) -> None:
        while not self.end_run_if_a_rank_died():
            time.sleep(self.interval)

    def end_run_if_a_rank_died(self, patience: float = 0.0) -> bool:
        """End the run if a launched rank ended with a non-zero status; whether all of them ended with 0.

        ``patience``: seconds to keep looking, for a caller that has seen a collective fail: the transport can notice
        a dead process a moment before it can be waited for.
        """
        deadline = time.monotonic() + patience
        while True:
            codes = [proc.poll() for proc in self._procs]
            for index, code in enumerate(codes):
                if code:
                    self._end_run(index, code)
            if all(code == 0 for code in codes) or time.monotonic() >= deadline:
                return all(code == 0 for code in codes)
            time.sleep(0.05)

    def _end_run(self, index: int, code: int) -> None:
        dead = self._procs[index]
        others = [proc for proc in self._procs if proc.poll() is None]
        ranks = ", ".join(str(self._first_rank + self._procs.index(proc)) for proc in others)
        stopping = f"stopping the other ranks of this run (the first process{', ' + ranks if ranks else ''})"
        sys.stderr.write(
            f"lightning-accel: rank {self._first_rank + index} (pid {dead.pid}) {describe_status(code)}; {stopping}.\n"
        )
        sys.stderr.flush()
        for proc in others:
            # SIGKILL: a rank waiting in a collective does not react to SIGTERM.
            proc.kill()
        for proc in others:
            proc.wait()
        _remove_run_state(self._procs)  # every launched rank has ended
        os._exit(_shell_status(code))


class _LauncherWatcher(threading.Thread):
    """In a launched rank: ends this rank when the first process is gone before its run ended."""

    def __init__(self, launcher_pid: int, rank: int, state: RunState | None, interval: float) -> None:
        super().__init__(daemon=True, name="lightning-accel-launcher-watch")
        self._launcher_pid = launcher_pid
        self._rank = rank
        self._state = state
        self.interval = interval
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.wait(self.interval):
            if self.report_if_launcher_gone():
                os._exit(1)

    def report_if_launcher_gone(self, patience: float = 0.0) -> bool:
        """Say so on standard error when the first process is gone before its run ended; whether it is.

        ``patience``: seconds to keep looking, for a caller that has seen a collective fail: the transport can notice
        a dead process a moment before the process is reparented. Such a caller also takes a first process that has
        recorded its run's failure as ended, though it may still be tearing down (and waiting on this rank).
        """
        deadline = time.monotonic() + patience
        while True:
            gone = os.getppid() != self._launcher_pid
            state = self._state.read() if self._state is not None else ""
            failed = patience > 0 and state.startswith("failed: ")
            if gone or failed or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if not (gone or failed) or self._stopped.is_set() or state == "done":
            return False
        if state.startswith("failed: "):
            how = f"stopped with {state[len('failed: ') :]}"
        else:
            how = "is gone (it was killed, or exited before its teardown)"
        sys.stderr.write(
            f"lightning-accel: rank 0 (pid {self._launcher_pid}, the process that started this run) {how}; "
            f"rank {self._rank} stops too.\n"
        )
        sys.stderr.flush()
        return True


def watch_ranks(launcher: Any) -> None:
    """Make Lightning's subprocess launcher watch the ranks it starts (see the module's docstring).

    Call it from a strategy's ``_configure_launcher`` after Lightning's; launchers other than Lightning's
    ``_SubprocessScriptLauncher`` (of either tree) are left as they are.
    """
    from lightning_accel.core import compat

    base = type(launcher)
    if base.__name__ != "_SubprocessScriptLauncher":
        return
    launcher.__class__ = _rank_watching_class(base, compat.set_num_threads_if_needed)


_WATCHING_CLASSES: dict[type, type] = {}


def _rank_watching_class(base: type, set_num_threads: Callable[[int], None]) -> type:
    watching = _WATCHING_CLASSES.get(base)
    if watching is not None:
        return watching
    # The Trainer's launcher takes `trainer=` and does not pass it on; Fabric's passes every keyword on.
    drops_trainer = "trainer" in inspect.signature(base.launch).parameters  # type: ignore[attr-defined]

    def launch(self: Any, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # Lightning's launch, with this module's watcher in place of Lightning's observer.
        if drops_trainer:
            kwargs.pop("trainer", None)
        self.cluster_environment.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
        if not self.cluster_environment.creates_processes_externally:
            _launch_children(self)
        set_num_threads(self.num_processes)
        return function(*args, **kwargs)

    watching = type(base.__name__, (base,), {"launch": launch, "__module__": __name__})
    _WATCHING_CLASSES[base] = watching
    return watching


def _launch_children(launcher: Any) -> None:
    global _run_state, _watching_children
    _run_state = RunState.create(expected_ranks=launcher.num_processes - 1)
    os.environ[_LAUNCHER_PID] = str(os.getpid())
    os.environ[_RUN_STATE] = _run_state.path
    try:
        launcher._call_children_scripts()
    finally:
        # Only the ranks launched here inherit these; later subprocesses of the user's script must not.
        del os.environ[_LAUNCHER_PID], os.environ[_RUN_STATE]
    first_rank = launcher.cluster_environment.node_rank() * launcher.num_processes + 1
    _watching_children = _ChildWatcher(launcher.procs, first_rank, watch_interval())
    _watching_children.start()
    atexit.register(_remove_run_state, list(launcher.procs))


def _remove_run_state(procs: Sequence[subprocess.Popen[Any]]) -> None:
    """In the first process, at its exit: remove the run's note if its name outlived every launched rank.

    The name is gone already once every launched rank has joined; a rank still running that has not joined yet will
    count itself in (and remove it) as it leaves.
    """
    if _run_state is not None and all(proc.poll() is not None for proc in procs):
        _run_state.remove()


def start_run(rank: int) -> None:
    """At a strategy's set-up: record a run under way (first process), or watch the first process (a launched rank).

    A no-op for ranks of external launchers.
    """
    global _watching_launcher
    launcher_pid = os.environ.get(_LAUNCHER_PID)
    if not launcher_pid or int(launcher_pid) == os.getpid():
        if _run_state is not None:
            _run_state.write("running")
        return
    if _watching_launcher is not None:
        return
    _watching_launcher = _LauncherWatcher(int(launcher_pid), rank, _join_run_state(), watch_interval())
    _watching_launcher.start()


def _join_run_state() -> RunState | None:
    """In a launched rank: its handle on the first process's note, joined once (see ``core.run_state``)."""
    global _run_state
    path = os.environ.get(_RUN_STATE)
    if _run_state is None and path:
        _run_state = RunState.join(path)
    return _run_state


def finish_run() -> None:
    """At a strategy's teardown: tell the launched ranks how this process's run ended; stop watching the first one.

    In the first process, the run's note records ``done``, or the exception being handled when the teardown runs
    from Lightning's error handling (so a launched rank can say what rank 0 stopped with).
    """
    global _watching_launcher
    error = sys.exc_info()[1]
    launcher_pid = os.environ.get(_LAUNCHER_PID)
    if _run_state is not None and not (launcher_pid and int(launcher_pid) != os.getpid()):
        # First, so that a launched rank waiting on this process's failure can tell it at once.
        _run_state.write("done" if error is None else f"failed: {type(error).__name__}: {error}")
    if _watching_launcher is not None:
        if error is not None:
            # The transport often notices a dead rank 0 first (a collective raises "Connection reset by peer"):
            # name it before Lightning reports that error.
            _watching_launcher.report_if_launcher_gone(patience=2 * _watching_launcher.interval)
        _watching_launcher.stop()
        _watching_launcher = None
    if _watching_children is not None and error is not None:
        # As above, the other way round: name a dead launched rank before Lightning reports the collective's error.
        _watching_children.end_run_if_a_rank_died(patience=2 * _watching_children.interval)
    if launcher_pid and int(launcher_pid) != os.getpid():
        # A launched rank: done with the note. One whose run failed before its set-up counts itself in now, so that
        # the last rank still removes the name.
        _join_run_state()
