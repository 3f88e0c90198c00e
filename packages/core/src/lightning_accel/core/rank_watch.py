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
launcher (``torchrun``, SLURM, MPI) are that launcher's to watch; nothing is started for them.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lightning_accel.core.errors import ConfigurationError

__all__ = ["INTERVAL_VARIABLE", "describe_status", "finish_run", "start_run", "watch_interval", "watch_ranks"]

INTERVAL_VARIABLE = "LIGHTNING_ACCEL_RANK_WATCH_INTERVAL"
_DEFAULT_INTERVAL = 1.0
# Set by the first process for the ranks it launches: its pid, and a file it writes when its run ends.
_LAUNCHER_PID = "LIGHTNING_ACCEL_LAUNCHER_PID"
_RUN_STATE = "LIGHTNING_ACCEL_RUN_STATE"

_watching_launcher: _LauncherWatcher | None = None
_watching_children: _ChildWatcher | None = None
_run_state_file: str | None = None


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
        _remove_run_state(self._procs, _run_state_file, wait=0.0)  # every launched rank has ended
        os._exit(_shell_status(code))


class _LauncherWatcher(threading.Thread):
    """In a launched rank: ends this rank when the first process is gone before its run ended."""

    def __init__(self, launcher_pid: int, rank: int, state_file: str | None, interval: float) -> None:
        super().__init__(daemon=True, name="lightning-accel-launcher-watch")
        self._launcher_pid = launcher_pid
        self._rank = rank
        self._state_file = state_file
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
        a dead process a moment before the process is reparented.
        """
        deadline = time.monotonic() + patience
        while os.getppid() == self._launcher_pid and time.monotonic() < deadline:
            time.sleep(0.05)
        if os.getppid() == self._launcher_pid or self._stopped.is_set():
            return False
        state = _read_state(self._state_file)
        if state == "done":
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


def _read_state(path: str | None) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


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
    global _run_state_file, _watching_children
    fd, _run_state_file = tempfile.mkstemp(prefix="lightning-accel-run-", suffix=".state")
    os.close(fd)
    os.environ[_LAUNCHER_PID] = str(os.getpid())
    os.environ[_RUN_STATE] = _run_state_file
    try:
        launcher._call_children_scripts()
    finally:
        # Only the ranks launched here inherit these; later subprocesses of the user's script must not.
        del os.environ[_LAUNCHER_PID], os.environ[_RUN_STATE]
    first_rank = launcher.cluster_environment.node_rank() * launcher.num_processes + 1
    _watching_children = _ChildWatcher(launcher.procs, first_rank, watch_interval())
    _watching_children.start()
    atexit.register(_remove_run_state, list(launcher.procs), _run_state_file)


def _remove_run_state(procs: Sequence[subprocess.Popen[Any]], path: str | None, wait: float = 5.0) -> None:
    """Remove a run's state file, at the first process's exit, once the ranks it launched have ended.

    A launched rank reads the file only after the first process is gone, to tell how its run ended, so it is kept
    while one of them still runs after ``wait`` seconds (they end with the first process's run, normally together).
    """
    deadline = time.monotonic() + wait
    while any(proc.poll() is None for proc in procs):
        if time.monotonic() >= deadline:
            return
        time.sleep(0.05)
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)


def start_run(rank: int) -> None:
    """At a strategy's set-up: record a run under way (first process), or watch the first process (a launched rank).

    A no-op for ranks of external launchers.
    """
    global _watching_launcher
    if _run_state_file is not None:
        Path(_run_state_file).write_text("running")
    launcher_pid = os.environ.get(_LAUNCHER_PID)
    if not launcher_pid or int(launcher_pid) == os.getpid() or _watching_launcher is not None:
        return
    _watching_launcher = _LauncherWatcher(int(launcher_pid), rank, os.environ.get(_RUN_STATE), watch_interval())
    _watching_launcher.start()


def finish_run() -> None:
    """At a strategy's teardown: tell the launched ranks how this process's run ended; stop watching the first one.

    In the first process, the state file records ``done``, or the exception being handled when the teardown runs
    from Lightning's error handling (so a launched rank can say what rank 0 stopped with).
    """
    global _watching_launcher
    error = sys.exc_info()[1]
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
    if _run_state_file is not None:
        state = "done" if error is None else f"failed: {type(error).__name__}: {error}"
        Path(_run_state_file).write_text(state)
