"""The poptorch yardstick (benchmarks/poptorch_yardstick.py) on a small stand-in for poptorch's git mirror."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import poptorch_yardstick  # noqa: E402

SAMPLE = """
import time
import pytest
import helpers


def test_passes():
    assert True


def test_fails():
    assert 1 == 2, "a real failure"


@pytest.mark.skip(reason="Hardware IPU needed to test this feature.")
def test_skipped():
    pass


def test_reads_poptorch_logs():
    helpers.LogChecker("no such line").assert_contains("Compiling")


def test_uses_a_left_out_name():
    raise RuntimeError("'poptorch_py_error': poptorch.poptorch_core is not emulated: it is poptorch's C++ binding.")


def test_runs_too_long():
    time.sleep(600)
"""

HELPERS = """
class LogChecker:
    def __init__(self, log):
        self._log = log

    def assert_contains(self, text):
        assert text in self._log, f"{self._log} does not contain {text}"
"""


def _mirror(tmp_path: Path) -> Path:
    repo = tmp_path / "poptorch"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "conftest.py").write_text("")
    (repo / "tests" / "helpers.py").write_text(HELPERS)
    (repo / "tests" / "sample_test.py").write_text(SAMPLE)
    identity = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    env = {**os.environ, **identity}
    for command in (["init", "-q"], ["add", "."], ["commit", "-qm", "tests"], ["tag", poptorch_yardstick.TAG]):
        subprocess.run(["git", "-C", str(repo), *command], check=True, env=env)
    # A later commit that the tag does not have: the yardstick must read the tag.
    (repo / "tests" / "later_test.py").write_text("def test_later():\n    pass\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "later"], check=True, env=env)
    return repo


def test_without_the_mirror_it_says_so_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert poptorch_yardstick.main(["--source", str(tmp_path / "absent"), "--results", str(tmp_path)]) == 2
    assert "poptorch's sources are not at" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_each_test_of_a_file_is_classified_and_written(tmp_path: Path) -> None:
    mirror, results = _mirror(tmp_path), tmp_path / "results"
    arguments = [
        "sample_test.py",
        "--source",
        str(mirror),
        "--results",
        str(results),
        "--name",
        "run",
        "--timeout",
        "2",
    ]
    assert poptorch_yardstick.main(arguments) == 0
    data = json.loads((results / "run.json").read_text())
    assert data["meta"]["read"].startswith(poptorch_yardstick.TAG)
    (entry,) = data["files"]
    categories = {record["nodeid"].split("::")[1]: record["category"] for record in entry["tests"]}
    assert categories == {
        "test_passes": "passed",
        "test_fails": "failed",
        "test_skipped": "skipped",
        "test_reads_poptorch_logs": "needs hardware logs",
        "test_uses_a_left_out_name": "not emulated",
        "test_runs_too_long": "timeout",
    }
    page = (results / "run.md").read_text()
    assert "| sample_test.py | 6 | 1 | 1 | 0 | 1 | 1 | 1 | 1 |" in page
    assert "a real failure" in page
    # A file that the tag does not have is refused by name.
    assert poptorch_yardstick.main(["later_test.py", "--source", str(mirror), "--results", str(results)]) == 2
