"""Helpers of the deepspeed-hpu tests (a uniquely named module, so that other packages' test helpers never clash)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).parent / "scripts"
# The user-facing examples are the tests' scripts too, so that they cannot drift apart.
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "deepspeed_hpu"
# The session's setting as the conftest left it ("hpu" unless set explicitly): passed on to children, never forced.
SESSION_EMULATE = os.environ.get("LIGHTNING_ACCEL_EMULATE", "hpu")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _script(name: str) -> Path:
    example = EXAMPLES / name
    return example if example.exists() else SCRIPTS / name


def run_script(name: str, *args: str) -> None:
    """Run ``name`` (an example, else a test script) on two emulated HPUs; fail with its output when it fails."""
    env = {k: v for k, v in os.environ.items() if k not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK"}}
    env.update(
        LIGHTNING_ACCEL_EMULATE=SESSION_EMULATE,
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    done = subprocess.run(
        [sys.executable, str(_script(name)), *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def read_json(path: Path) -> Any:
    """The JSON document at ``path``."""
    return json.loads(path.read_text())
