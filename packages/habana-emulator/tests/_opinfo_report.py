"""The pass rates of the OpInfo conformance suite (``test_opinfo``), printed at the end of a pytest session.

Each test of ``test_opinfo`` records the counts of its cases as a user property (:data:`PROPERTY`); pytest-xdist
sends user properties back with each report, so :func:`pytest_runtest_logreport` sums them in the process that
prints the summary, one or several workers alike. The package's ``conftest`` imports these two hooks.

The rate is the one issue 21 sets the target for: of the cases that run without error on the CPU, the share that
conform on ``"hpu"`` (equal results within the tolerances), forward and backward separately. Cases where the CPU
raises are counted apart: they conform when ``"hpu"`` raises the same exception type.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = ["PROPERTY", "counts_of", "pytest_runtest_logreport", "pytest_terminal_summary"]

PROPERTY = "opinfo_counts"

_totals: Counter[str] = Counter()


def counts_of(results: Iterable[Any]) -> dict[str, int]:
    """The counts of ``results`` (``CaseResult`` s) by direction: cases run on the CPU without error, how many of
    those conform, cases where the CPU raises, how many of those conform."""
    counts: Counter[str] = Counter()
    for result in results:
        kind = "cpu_ok" if result.cpu_ok else "cpu_raises"
        counts[f"{result.direction}.{kind}"] += 1
        if result.status != "fail":
            counts[f"{result.direction}.{kind}.conform"] += 1
    return dict(counts)


def pytest_runtest_logreport(report: Any) -> None:
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == PROPERTY:
            _totals.update(value)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _totals:
        return
    write = terminalreporter.write_line
    terminalreporter.section("OpInfo conformance of the emulated 'hpu' (cases that run on the CPU)")
    for direction in ("forward", "backward"):
        ok = _totals[f"{direction}.cpu_ok"]
        conform = _totals[f"{direction}.cpu_ok.conform"]
        raises = _totals[f"{direction}.cpu_raises"]
        same = _totals[f"{direction}.cpu_raises.conform"]
        rate = 100.0 * conform / ok if ok else 100.0
        write(
            f"{direction:>8}: {conform} of {ok} cases conform on 'hpu' ({rate:.2f}%); "
            f"the CPU raises in {raises} more, 'hpu' raises the same type in {same}"
        )
