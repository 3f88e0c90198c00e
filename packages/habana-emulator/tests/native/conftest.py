"""Each test of the C++ device runs a script in a fresh process: loading a device into torch cannot be undone, and
the worker's own process has the Python-emulated SDK loaded (``LIGHTNING_ACCEL_EMULATE=hpu`` in the parent conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIGHTNING_ACCEL_EMULATE", "PT_HPU_", "HABANA_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return env


def run_script(code: str, *, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    script = "from device_prelude import device, report\n" + textwrap.dedent(code)
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env or _environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"the device script failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result


@pytest.fixture(scope="session")
def built_device() -> None:
    """Builds the device once (or finds it in the cache) before the first test that needs it."""
    run_script("report(ok=True)")


@pytest.fixture
def on_device(built_device: None):
    """Runs a script on the C++ device and returns what it reported with ``report(...)``."""

    def run(code: str) -> dict[str, Any]:
        out = run_script(code).stdout.strip().splitlines()
        return json.loads(out[-1])

    return run


@pytest.fixture
def device_env() -> dict[str, str]:
    return _environment()
