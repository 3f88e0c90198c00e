"""Shared fixtures: a clean environment and a way to run scripts in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from lightning_accel.core.discovery import reset_discovery
from lightning_accel.core.emulation import reset_emulation_settings

_OUR_VARIABLES = (
    "LIGHTNING_ACCEL_EMULATE",
    "LIGHTNING_ACCEL_EMULATED_DEVICES",
    "LIGHTNING_ACCEL_EMULATE_BACKEND",
    "LIGHTNING_ACCEL_DISABLE",
    "LIGHTNING_ACCEL_AUTOLOAD",
    "TESTACC_UNAVAILABLE",
)


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in _OUR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    reset_emulation_settings()
    reset_discovery()
    yield
    reset_emulation_settings()
    reset_discovery()


def run_python(
    code: str, tmp_path: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = (), timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as a script in a fresh interpreter of this environment and return the finished process."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    full_env = {k: v for k, v in os.environ.items() if k not in _OUR_VARIABLES and k != "PYTEST_CURRENT_TEST"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, *args, str(script)],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def python(tmp_path: Path):  # type: ignore[no-untyped-def]
    def run(
        code: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        result = run_python(code, tmp_path, env, args)
        return result

    return run


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """List the private Lightning names checked against the installed Lightning (issue 12), when they were."""
    from importlib.metadata import PackageNotFoundError, version

    module = sys.modules.get("test_private_names") or next(
        (m for name, m in sys.modules.items() if name.endswith("test_private_names")), None
    )
    checked = getattr(module, "CHECKED", None)
    if not checked:
        return
    versions = []
    for dist in ("lightning", "pytorch-lightning"):
        try:
            versions.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            continue
    failed = [f"{tree}:{name}" for tree, name, problem in checked if problem is not None]
    terminalreporter.section("private Lightning names checked")
    moved = f": {', '.join(failed)}" if failed else ""
    terminalreporter.write_line(f"{len(checked)} checks on {', '.join(versions)}; {len(failed)} moved{moved}")
    for tree in sorted({tree for tree, _, _ in checked}):
        names = sorted(name for t, name, _ in checked if t == tree)
        terminalreporter.write_line(f"[{tree}] " + ", ".join(names))
