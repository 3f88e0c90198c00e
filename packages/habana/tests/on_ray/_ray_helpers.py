"""Running the Ray scripts of these tests in child processes, each with its own local Ray cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from _habana_helpers import script_env

SCRIPTS = Path(__file__).resolve().parent / "scripts"
STEPS_PER_EPOCH = 4  # scripts/train_on_ray.py: 4 batches per worker and epoch, 2 epochs


def run_ray_script(name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/<name>`` with the session's HPUs; Ray's token authentication and usage report are off.

    The cluster is local (``ray.init()`` in the child, nothing contacted outside this machine), so the token that
    Ray would otherwise write to the user's home directory protects nothing here.
    """
    environment = script_env(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", **env)
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), *args], env=environment, capture_output=True, text=True, timeout=400
    )


def train(mode: str, out: Path) -> None:
    """Run ``scripts/train_on_ray.py MODE OUT`` on two (emulated) HPUs; fail with Ray's output unless it ends ok."""
    run = run_ray_script("train_on_ray.py", mode, str(out), LIGHTNING_ACCEL_EMULATED_DEVICES="2")
    result = out / f"{mode}-result.txt"
    assert run.returncode == 0 and result.exists(), run.stderr[-4000:]
    assert result.read_text() == "ok", result.read_text()[-4000:]


def worker_reports(out: Path, mode: str, attempt: int) -> list[dict[str, Any]]:
    """What ranks 0 and 1 wrote at the end of their training function in attempt ``attempt``."""
    return [torch.load(out / f"{mode}-rank{rank}-attempt{attempt}.pt") for rank in (0, 1)]


def assert_same_weights(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """Bit for bit."""
    assert actual.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=0, msg=name)
