"""CI's record: each nox session's time and result, each test's time and outcome, and what failed.

``noxfile.py`` records every session it runs (:func:`record_session`) and gives every pytest run a JUnit XML report
in the same folder (:func:`junit_path`). From that folder:

- ``python3 tools/ci_report.py summary`` prints each session's result and time and, for a failed run, which session
  and which test failed (``.ci/run`` ends with it);
- ``python3 tools/ci_report.py markdown --note "..."`` writes the record kept in ``benchmarks/results/ci.md``: each
  session's time and the 30 slowest tests.

Importable without nox, so that it is tested (``tests/test_ci_report.py``).

Example:
    >>> format_seconds(1754.2)
    '29:14'
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "REPORTS",
    "SessionRecord",
    "TestRecord",
    "format_seconds",
    "junit_path",
    "markdown",
    "read_sessions",
    "read_tests",
    "record_session",
    "summary",
]

REPORTS = Path(__file__).resolve().parents[1] / ".nox" / "_reports"
_SESSIONS = "sessions.jsonl"


@dataclass(frozen=True)
class SessionRecord:
    """One nox session: its name, its time in seconds, whether it passed."""

    name: str
    seconds: float
    ok: bool


@dataclass(frozen=True)
class TestRecord:
    """One test case of a JUnit report: its nox session, node id, time, outcome and failure message."""

    session: str
    test: str
    seconds: float
    outcome: str  # "passed", "failed", "error" or "skipped"
    message: str


def format_seconds(seconds: float) -> str:
    """``mm:ss`` (``h:mm:ss`` past an hour)."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def junit_path(reports: Path, session: str) -> Path:
    """A new JUnit XML path for one pytest run of ``session`` (a session may run pytest several times)."""
    reports.mkdir(parents=True, exist_ok=True)
    index = len(list(reports.glob(f"{session}-*.xml")))
    return reports / f"{session}-{index}.xml"


def record_session(reports: Path, name: str, seconds: float, ok: bool) -> None:
    """Append one session's result to the record (one JSON line per session, in the order they ran)."""
    reports.mkdir(parents=True, exist_ok=True)
    with (reports / _SESSIONS).open("a") as record:
        record.write(json.dumps({"name": name, "seconds": round(seconds, 1), "ok": ok}) + "\n")


def read_sessions(reports: Path) -> list[SessionRecord]:
    """The sessions recorded in ``reports``, in the order they ran."""
    path = reports / _SESSIONS
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [SessionRecord(row["name"], float(row["seconds"]), bool(row["ok"])) for row in rows]


def _test_id(case: ElementTree.Element) -> str:
    classname, name = case.get("classname", ""), case.get("name", "")
    # pytest's classname is the test file's dotted path, then any class: give it back as a node id.
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        if parts[cut - 1].startswith("test_") or parts[cut - 1] == "tests":
            module = "/".join(parts[:cut]) + ".py"
            return "::".join([module, *parts[cut:], name])
    return f"{classname}::{name}" if classname else name


def read_tests(reports: Path) -> list[TestRecord]:
    """Every test case of every JUnit XML report in ``reports``; an unreadable report (a killed run) is skipped."""
    tests = []
    for path in sorted(reports.glob("*.xml")):
        session = path.stem.rsplit("-", 1)[0]
        try:
            root = ElementTree.parse(path).getroot()
        except ElementTree.ParseError:
            continue
        for case in root.iter("testcase"):
            outcome, message = "passed", ""
            for kind in ("failure", "error", "skipped"):
                found = case.find(kind)
                if found is not None:
                    outcome = "failed" if kind == "failure" else kind
                    message = (found.get("message") or found.text or "").strip()
                    break
            tests.append(TestRecord(session, _test_id(case), float(case.get("time") or 0.0), outcome, message))
    return tests


def _first_line(text: str, width: int = 200) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def summary(reports: Path) -> str:
    """Each session's result and time; for a failed run, the sessions and the tests that failed."""
    sessions = read_sessions(reports)
    tests = read_tests(reports)
    lines = ["lightning-accel CI: nox sessions"]
    for record in sessions:
        lines.append(f"  {record.name:<24} {'passed' if record.ok else 'FAILED':<7} {format_seconds(record.seconds)}")
    lines.append(f"  {'total':<24} {'':<7} {format_seconds(sum(r.seconds for r in sessions))}")
    failed_sessions = [r.name for r in sessions if not r.ok]
    if failed_sessions:
        lines.append("")
        lines.append("FAILED nox sessions: " + ", ".join(failed_sessions))
        for name in failed_sessions:
            failures = [t for t in tests if t.session == name and t.outcome in ("failed", "error")]
            if not failures:
                lines.append(f"  {name}: no test failed; the session stopped outside pytest (its log above says where)")
            for test in failures:
                lines.append(f"  {name}: {test.outcome.upper()} {test.test}")
                if test.message:
                    lines.append(f"      {_first_line(test.message)}")
    return "\n".join(lines)


def markdown(reports: Path, note: str, slowest: int = 30) -> str:
    """The record of ``benchmarks/results/ci.md``: sessions' times and the ``slowest`` tests."""
    sessions = read_sessions(reports)
    tests = read_tests(reports)
    total = sum(r.seconds for r in sessions)
    out = [
        "# CI's time",
        "",
        f"{note}",
        "",
        "Written by `python3 tools/ci_report.py markdown` from the run's `.nox/_reports` (noxfile.py records every "
        "session; every pytest run writes a JUnit report). CI's limit is 90 minutes; the target is under 30 on 2 idle "
        "cores.",
        "",
        "| nox session | result | time |",
        "| --- | --- | --- |",
    ]
    for record in sessions:
        out.append(f"| {record.name} | {'passed' if record.ok else 'FAILED'} | {format_seconds(record.seconds)} |")
    out.append(f"| **total** | | **{format_seconds(total)}** |")
    counts: dict[str, int] = {}
    for test in tests:
        counts[test.outcome] = counts.get(test.outcome, 0) + 1
    out += [
        "",
        "Tests: " + ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())) + ".",
        "",
        f"## The {slowest} slowest tests",
        "",
        "Each test's own time (set-up, call and tear-down); the slow suites run on two pytest-xdist workers.",
        "",
        "| seconds | session | test |",
        "| ---: | --- | --- |",
    ]
    for test in sorted(tests, key=lambda t: t.seconds, reverse=True)[:slowest]:
        out.append(f"| {test.seconds:.1f} | {test.session} | `{test.test}` |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["summary", "markdown"])
    parser.add_argument("--reports", type=Path, default=REPORTS, help="the folder noxfile.py wrote (.nox/_reports)")
    parser.add_argument("--note", default="", help="markdown: how and where the run was made")
    args = parser.parse_args(argv)
    print(summary(args.reports) if args.what == "summary" else markdown(args.reports, args.note), end="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
