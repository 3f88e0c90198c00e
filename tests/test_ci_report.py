"""CI's record (tools/ci_report.py): a failed run names its session and test; ci.md lists times and slowest tests."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import ci_report  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="packages.habana.tests.test_distributed" name="test_lockstep[by-name]" time="41.5">
<failure message="AssertionError: a state file was left">long traceback</failure></testcase>
<testcase classname="packages.habana.tests.test_fsdp.TestSaves" name="test_saves" time="12.0"/>
<testcase classname="packages.habana.tests.test_fsdp" name="test_skipped" time="0.01">
<skipped message="needs Gaudi"/></testcase>
<testcase classname="packages.habana.tests.test_rank_death" name="test_dies" time="20.25"/>
</testsuite></testsuites>
"""


def _reports(tmp_path: Path, hpu_ok: bool) -> Path:
    reports = tmp_path / "reports"
    ci_report.record_session(reports, "lint", 3.2, True)
    ci_report.record_session(reports, "hpu_tests", 421.0, hpu_ok)
    path = ci_report.junit_path(reports, "hpu_tests")
    path.write_text(JUNIT)
    assert ci_report.junit_path(reports, "hpu_tests").name == "hpu_tests-1.xml"  # the session's next pytest run
    return reports


def test_a_failed_run_ends_naming_its_session_and_test(tmp_path: Path) -> None:
    text = ci_report.summary(_reports(tmp_path, hpu_ok=False))
    assert "  hpu_tests                FAILED  7:01" in text
    assert "FAILED nox sessions: hpu_tests" in text
    assert "hpu_tests: FAILED packages/habana/tests/test_distributed.py::test_lockstep[by-name]" in text
    assert "AssertionError: a state file was left" in text
    assert "test_saves" not in text and "test_dies" not in text


def test_a_session_that_failed_outside_pytest_is_named(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    ci_report.record_session(reports, "lint", 3.0, False)
    assert "lint: no test failed; the session stopped outside pytest" in ci_report.summary(reports)


def test_a_passed_run_lists_sessions_and_total_only(tmp_path: Path) -> None:
    text = ci_report.summary(_reports(tmp_path, hpu_ok=True))
    assert "FAILED" not in text
    assert "  total                            7:04" in text


def test_the_record_lists_each_session_and_the_slowest_tests_first(tmp_path: Path) -> None:
    text = ci_report.markdown(_reports(tmp_path, hpu_ok=True), "An idle run.", slowest=2)
    assert "| hpu_tests | passed | 7:01 |" in text and "| **total** | | **7:04** |" in text
    assert "Tests: 1 failed, 2 passed, 1 skipped." in text
    rows = [line for line in text.splitlines() if line.startswith("| 4") or line.startswith("| 2")]
    assert rows == [
        "| 41.5 | hpu_tests | `packages/habana/tests/test_distributed.py::test_lockstep[by-name]` |",
        "| 20.2 | hpu_tests | `packages/habana/tests/test_rank_death.py::test_dies` |",
    ]
    assert "TestSaves" not in text  # only the two slowest


def test_a_truncated_report_of_a_killed_run_is_skipped(tmp_path: Path) -> None:
    reports = _reports(tmp_path, hpu_ok=False)
    (reports / "ray_tests-0.xml").write_text("<testsuites><testsuite")
    assert {t.session for t in ci_report.read_tests(reports)} == {"hpu_tests"}
