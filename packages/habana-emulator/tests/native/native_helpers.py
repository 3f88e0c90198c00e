"""Running a script on the C++ device in a fresh process (loading a device into torch cannot be undone)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).parent


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIGHTNING_ACCEL_EMULATE", "PT_HPU_", "HABANA_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return env


def run_script(code: str, *, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    script = "from device_prelude import device, report\n" + textwrap.dedent(code)
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env or environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"the device script failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result
