"""``lightning-accel selftest``: checks from a plugin's spec, each passed / failed / skipped with its time, a crash
reported without losing the other checks, variables the SDK reads at load given to a process of their own."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lightning_accel.core.plugin import ENTRY_POINT_GROUP
from lightning_accel.core.pycompat import entry_points_of

CHECKS_MODULE = """
import os

from lightning_accel.core.plugin import Availability, PluginSpec
from lightning_accel.core.selftest import Check, CheckFailed, CheckSkipped

T = "fake_selftest:"
CHECKS = (
    Check("fake.pass", "fake", T + "passes", "passes", {}),
    Check("fake.skip", "fake", T + "skips", "skips"),
    Check("fake.fail", "fake", T + "fails", "fails"),
    Check("fake.crash", "fake", T + "crashes", "kills its process"),
    Check("fake.after_crash", "fake", T + "passes", "runs after the crash, in the same process"),
    Check("fake.env", "fake", T + "reads_env", "needs FAKE_MODE at start", {"FAKE_MODE": "1"}),
)
OTHER = (Check("other.pass", "other", T + "passes", "a device nobody has"),)


def passes(ctx):
    assert ctx.workdir.is_dir() and not any(ctx.workdir.iterdir())
    return f"devices={ctx.devices} FAKE_MODE={os.environ.get('FAKE_MODE')}"


def skips(ctx):
    raise CheckSkipped("no widget on this machine")


def fails(ctx):
    raise CheckFailed("expected 1, got 2")


def crashes(ctx):
    print("about to die", flush=True)
    os._exit(7)


def reads_env(ctx):
    return f"FAKE_MODE={os.environ['FAKE_MODE']}"


def here():
    return Availability("emulated", "fake devices", devices=3)


def nowhere():
    return Availability("unavailable", "no other device: install the other SDK")


def spec(name, checks, availability):
    return PluginSpec(name, "fake-" + name, (), (), "fake_selftest:" + availability, selftest="fake_selftest:" + checks)


FAKE = spec("fake", "CHECKS", "here")
OTHER_PLUGIN = spec("other", "OTHER", "nowhere")
"""


@pytest.fixture
def fake_plugins(tmp_path: Path) -> dict[str, str]:
    """Two plugins with self-tests, found through entry points on PYTHONPATH; the installed ones disabled."""
    (tmp_path / "fake_selftest.py").write_text(textwrap.dedent(CHECKS_MODULE))
    info = tmp_path / "fake_selftest-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-selftest\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[lightning_accel.plugins]\nfake = fake_selftest:FAKE\nother = fake_selftest:OTHER_PLUGIN\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_ACCEL_")}
    installed = ",".join(sorted({entry.name for entry, _ in entry_points_of(ENTRY_POINT_GROUP)}))
    env.update(PYTHONPATH=str(tmp_path), LIGHTNING_ACCEL_DISABLE=installed)
    return env


def _selftest(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lightning_accel.core.cli", "selftest", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_json_report_has_every_outcome_its_time_and_the_environment(
    fake_plugins: dict[str, str], tmp_path: Path
) -> None:
    temporary = tmp_path / "temporary"
    temporary.mkdir()
    done = _selftest({**fake_plugins, "TMPDIR": str(temporary)}, "--json")
    assert done.returncode == 1, done.stderr  # a check failed
    assert list(temporary.iterdir()) == []  # the crashed process's scratch folder too
    report = json.loads(done.stdout)
    outcome = {check["name"]: (check["status"], check["detail"]) for check in report["checks"]}
    assert list(outcome) == [
        "fake.pass",
        "fake.skip",
        "fake.fail",
        "fake.crash",
        "fake.after_crash",
        "fake.env",
        "other.pass",
    ]
    assert outcome["fake.pass"] == ("passed", "devices=3 FAKE_MODE=None")
    assert outcome["fake.skip"] == ("skipped", "no widget on this machine")
    assert outcome["fake.fail"][0] == "failed"
    assert outcome["fake.fail"][1].startswith("CheckFailed: expected 1, got 2\n(raised at ")
    # The crash takes its process down: it and the checks after it in that process fail, with what it printed.
    for name in ("fake.crash", "fake.after_crash"):
        status, detail = outcome[name]
        assert status == "failed"
        assert detail.startswith("its process exited with code 7 before the check reported")
        assert "about to die" in detail
    # Its own process, started with the variable; the others never saw it.
    assert outcome["fake.env"] == ("passed", "FAKE_MODE=1")
    assert outcome["other.pass"] == ("skipped", "no other device: install the other SDK")
    assert all(isinstance(check["seconds"], float) and check["seconds"] >= 0 for check in report["checks"])
    assert report["summary"] == {
        "passed": 2,
        "failed": 3,
        "skipped": 2,
        "total": 7,
        "seconds": report["summary"]["seconds"],
    }
    assert set(report["env"]) == {
        "python",
        "platform",
        "packages",
        "plugins",
        "sdks",
        "emulators",
        "variables",
        "emulation",
    }
    assert report["env"]["plugins"]["fake-selftest"] == "0.1"


def test_text_report_and_exit_status_zero_when_nothing_failed(fake_plugins: dict[str, str]) -> None:
    (Path(fake_plugins["PYTHONPATH"]) / "fake_selftest.py").write_text(
        textwrap.dedent(CHECKS_MODULE).replace("raise CheckFailed", "return 'fixed'; raise CheckFailed")
        + "\nCHECKS = CHECKS[:3]\n"
    )
    done = _selftest(fake_plugins)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("PASS  fake.pass ") and lines[0].endswith("passes: devices=3 FAKE_MODE=None")
    assert lines[1].startswith("SKIP  fake.skip ") and lines[2] == "      no widget on this machine"
    assert lines[3].startswith("PASS  fake.fail ") and lines[3].endswith("fails: fixed")
    assert lines[4].startswith("SKIP  other.pass ")
    assert lines[-1].startswith("2 passed, 0 failed, 2 skipped in ")
    assert "\r" not in done.stdout  # no progress bar when stdout is not a terminal


def test_only_the_requested_device_type(fake_plugins: dict[str, str]) -> None:
    done = _selftest(fake_plugins, "--json", "--ipu")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip() == (
        "lightning-accel selftest: selftest --ipu: no installed plugin has checks for device type 'ipu'. Installed "
        "checks cover: nothing. Install the vendor distribution (e.g. `pip install 'lightning-accel[habana]'` for "
        "--hpu, '[graphcore]' for --ipu)."
    )


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_progress_bar_naming_the_running_check_and_it_is_cleared_for_each_result() -> None:
    from lightning_accel.core.plugin import Availability
    from lightning_accel.core.selftest import Check, CheckResult, PlannedCheck
    from lightning_accel.core.selftest.display import ProgressDisplay

    planned = PlannedCheck(Check("fake.fit", "fake", "m:f", "trains"), "fake", Availability("emulated", "", 1))
    terminal = _Terminal()
    display = ProgressDisplay(total=2, results_to=terminal, bar_to=terminal)
    display("started", planned, None)
    assert terminal.getvalue().startswith("\r\033[K\r[........................] 0/2 ")
    assert terminal.getvalue().endswith("fake.fit")
    display("finished", planned, CheckResult("fake.fit", "fake", "trains", "passed", "accuracy 1.0", 1.5))
    display("started", planned, None)
    shown = terminal.getvalue()
    assert "\r\033[K" + "PASS  fake.fit                   1.5 s  trains: accuracy 1.0\n" in shown
    assert shown.split("\r\033[K")[-1].startswith("\r[############............] 1/2 ")
