"""How ``lightning-accel selftest`` shows its checks: a live progress line in a terminal, one line per check."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from lightning_accel.core.selftest.checks import CheckResult
from lightning_accel.core.selftest.runner import PlannedCheck, SelftestReport

__all__ = ["ProgressDisplay", "format_result", "format_summary"]

_MARKS = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}
_BAR = 24


def format_result(result: CheckResult) -> str:
    """One line (plus the error's lines, indented, for a failure)."""
    head = f"{_MARKS[result.status]}  {result.name:<22} {result.seconds:7.1f} s  {result.description}"
    if result.status == "passed":
        return f"{head}: {result.detail}" if result.detail else head
    lines = result.detail.splitlines() or [""]
    return "\n".join([head, *(f"      {line}" for line in lines)])


def format_summary(report: SelftestReport) -> str:
    """The closing line: counts and total time."""
    counts = report.summary()
    return (
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
        f"in {counts['seconds']:.1f} s"
    )


class ProgressDisplay:
    """Prints each result as it arrives; in a terminal, also a progress bar naming the running check.

    Args:
        total: How many checks will report.
        results_to: Where result lines go (``None``: nowhere, for ``--json``).
        bar_to: Where the bar goes; drawn only when that stream is a terminal.

    Example:
        >>> import sys
        >>> display = ProgressDisplay(total=16, results_to=sys.stdout, bar_to=sys.stdout)
        >>> # run_selftest(progress=display) calls it with each check as it starts and each result as it arrives
    """

    def __init__(self, total: int, results_to: TextIO | None, bar_to: TextIO | None = None) -> None:
        self.total = total
        self.done = 0
        self.results_to = results_to
        self.bar_to = bar_to if bar_to is not None and bar_to.isatty() else None
        self._started = time.perf_counter()

    def __call__(self, event: str, item: PlannedCheck, result: CheckResult | None) -> None:
        self._clear()
        if event == "finished" and result is not None:
            self.done += 1
            if self.results_to is not None:
                print(format_result(result), file=self.results_to, flush=True)
        else:
            self._draw(item.check.name)

    def _draw(self, running: str) -> None:
        if self.bar_to is None:
            return
        filled = _BAR * self.done // max(self.total, 1)
        elapsed = time.perf_counter() - self._started
        line = f"[{'#' * filled}{'.' * (_BAR - filled)}] {self.done}/{self.total} {elapsed:5.0f} s  {running}"
        self.bar_to.write("\r" + line)
        self.bar_to.flush()

    def _clear(self) -> None:
        if self.bar_to is not None:
            self.bar_to.write("\r\033[K")
            self.bar_to.flush()


def default_streams(json_output: bool) -> tuple[TextIO | None, TextIO]:
    """Result lines to stdout unless printing JSON; the bar on stdout, or on stderr with ``--json``."""
    if json_output:
        return None, sys.stderr
    return sys.stdout, sys.stdout
