"""Run a test module's tests in one child pytest process and report each outcome in the parent.

For tests that change a process for good (loading the emulated SDK loads the C++ ``"hpu"`` device and registers
``torch.hpu``, which cannot be undone): the parent's test runs the child once, reads its JUnit report, and passes, skips
or fails as the same test did in the child (with its failure text).
"""

from __future__ import annotations

import functools
import os
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _emulator_helpers import PYTHON, script_env

__all__ = ["isolated_in_child"]


def _parse(report: Path) -> dict[str, tuple[str, str]]:
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, text = "passed", ""
        for child in case:
            if child.tag in {"failure", "error", "skipped"}:
                outcome, text = child.tag, (child.get("message") or "") + "\n" + (child.text or "")
        results[case.get("name", "")] = (outcome, text)
    return results


def isolated_in_child(
    test_file: str, child_var: str, timeout: int, before_each: Callable[[], None] | None = None, **env: str
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator: in the child (``child_var=1``) the test runs after ``before_each``; in the parent it reports.

    Args:
        test_file: The test module (``__file__``), run whole in the child.
        child_var: The environment variable that marks the child process.
        timeout: Seconds the child may take.
        before_each: Called in the child before each test.
        **env: More environment for the child.
    """
    in_child = os.environ.get(child_var) == "1"
    results: dict[str, tuple[str, str]] = {}

    def run_child() -> dict[str, tuple[str, str]]:
        if not results:
            report = Path(os.environ.get("TMPDIR", "/tmp")) / f"{Path(test_file).stem}_child_{os.getpid()}.xml"
            proc = subprocess.run(
                [PYTHON, "-m", "pytest", test_file, "-q", "-p", "no:cacheprovider", f"--junitxml={report}"],
                env=script_env(**{child_var: "1"}, **env),
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=Path(test_file).parent,
            )
            if report.exists():
                results.update(_parse(report))
                report.unlink()
            results["<process>"] = (str(proc.returncode), proc.stdout[-4000:] + proc.stderr[-4000:])
        return results

    def isolated(test: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(test)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            if in_child:
                if before_each is not None:
                    before_each()
                test(*args, **kwargs)
                return
            name = os.environ["PYTEST_CURRENT_TEST"].split("::")[-1].rsplit(" ", 1)[0]
            outcomes = run_child()
            if name not in outcomes:
                pytest.fail(f"the child pytest process did not run {name}:\n{outcomes['<process>'][1]}")
            outcome, text = outcomes[name]
            if outcome == "skipped":
                pytest.skip(text)
            if outcome != "passed":
                pytest.fail(f"{name} failed in the child process:\n{text}", pytrace=False)

        return wrapper

    return isolated
