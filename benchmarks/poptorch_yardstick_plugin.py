"""pytest plugin of the poptorch yardstick (poptorch_yardstick.py): a time limit per test and one JSON line per test.

Loaded with ``-p poptorch_yardstick_plugin`` into a pytest run of poptorch's own test files; it changes none of them.
``POPTORCH_YARDSTICK_TIMEOUT`` (seconds, 0 for none) limits each test's setup, call and teardown together: when the
time is up a :class:`YardstickTimeout` is raised in the test's thread (SIGALRM), and raised again every second until
the phase ends, because a first one may land in a ``__del__`` (torch's data-loader workers are shut down there),
where Python only prints it. ``POPTORCH_YARDSTICK_REPORT`` names the file that gets one JSON object per finished test,
written as each test ends, so a run that is killed still leaves the tests it finished.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Generator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

_LONGREPR_CHARS = 6000  # the end of a traceback: where the error and the frames that raised it are


class YardstickTimeout(Exception):
    """A test ran past the yardstick's limit."""


class _Limit:
    """The time left to the running test, and the alarm that enforces it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = 0.0
        self.fired = False

    def start(self) -> None:
        self.deadline = time.monotonic() + self.seconds
        self.fired = False

    def _fire(self, signum: int, frame: FrameType | None) -> None:
        self.fired = True
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        raise YardstickTimeout(f"the test ran past the yardstick's limit of {self.seconds:g} s")

    def arm(self) -> None:
        signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, max(self.deadline - time.monotonic(), 0.01))

    @staticmethod
    def disarm() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


_limit = _Limit(float(os.environ.get("POPTORCH_YARDSTICK_TIMEOUT", "0") or 0))
_report = os.environ.get("POPTORCH_YARDSTICK_REPORT")
_records: dict[str, dict[str, Any]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    _limit.start()
    yield


def _phase() -> Generator[None, None, None]:
    if _limit.seconds > 0:
        _limit.arm()
    try:
        yield
    finally:
        if _limit.seconds > 0:
            _limit.disarm()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield from _phase()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield from _phase()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    yield from _phase()


def _message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        return str(report.longrepr[2])
    return report.longreprtext.strip().splitlines()[-1] if report.longreprtext.strip() else ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    record = _records.setdefault(
        report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "phase": "", "seconds": 0.0, "message": ""}
    )
    record["seconds"] += report.duration
    if report.outcome != "passed" and record["outcome"] == "passed":
        # The first phase that did not pass decides: a failed setup is an error, a failed call a failure.
        failed_outside_call = report.outcome == "failed" and report.when != "call"
        record["outcome"] = "error" if failed_outside_call else report.outcome
        record["phase"] = report.when
        record["message"] = _message(report)
        record["longrepr"] = report.longreprtext[-_LONGREPR_CHARS:]
    if _limit.fired:
        record["timed_out"] = True
    if report.when == "teardown":
        if _report:
            with Path(_report).open("a", encoding="utf-8") as out:
                out.write(json.dumps(_records.pop(report.nodeid)) + "\n")
        else:
            _records.pop(report.nodeid)
