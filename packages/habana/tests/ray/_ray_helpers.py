"""Running the Ray scripts of these tests in child processes, each with its own local Ray cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _habana_helpers import script_env

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run_ray_script(name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/<name>`` with the session's HPUs; Ray's token authentication and usage report are off.

    The cluster is local (``ray.init()`` in the child, nothing contacted outside this machine), so the token that
    Ray would otherwise write to the user's home directory protects nothing here.
    """
    environment = script_env(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", **env)
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), *args], env=environment, capture_output=True, text=True, timeout=400
    )
