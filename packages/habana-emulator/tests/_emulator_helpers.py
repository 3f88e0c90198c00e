"""Helpers shared by the emulator's tests (a uniquely named module, so that test folders of other packages never clash).

The emulator's tests run on the emulator only, with nothing of lightning-accel-habana (the integration above it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

PYTHON = sys.executable
# What the SDK's initialize_distributed_hpu() writes at load when the variables are unset (gaudi-pytorch-bridge 1.19.0
# distributed/hccl/__init__.py:60-81); the emulator's load writes the same.
SDK_RENDEZVOUS_DEFAULTS = {"MASTER_ADDR": "localhost", "MASTER_PORT": "12345"}


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _sdk_rendezvous_defaults() -> list[str]:
    # The variables holding the SDK's default now and unset when the interpreter started (the core's start-up record).
    autoload = sys.modules.get("_lightning_accel_autoload")
    at_start = autoload.environment_at_start() if autoload is not None else None
    return [
        name
        for name, default in SDK_RENDEZVOUS_DEFAULTS.items()
        if os.environ.get(name) == default and (at_start is None or at_start.get(name) is None)
    ]


def script_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python process: the emulated HPUs, no inherited ranks, no SDK rendezvous defaults."""
    dropped = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", *_sdk_rendezvous_defaults()}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(LIGHTNING_ACCEL_EMULATE="hpu", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def run_rank_pair(code: str, timeout: float = 300) -> list[subprocess.CompletedProcess[str]]:
    """Run ``code`` in two fresh Python processes, ranks 0 and 1 (``sys.argv``: the rank, then a free port to meet on).

    A rank still running after ``timeout`` seconds raises ``subprocess.TimeoutExpired``; both are killed either way, so
    that a hung pair never outlives its test.
    """
    env, port = script_env(), str(free_port())
    ranks = [
        subprocess.Popen(
            [PYTHON, "-c", code, str(rank), port], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for rank in range(2)
    ]
    try:
        outputs = [rank.communicate(timeout=timeout) for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    return [
        subprocess.CompletedProcess(rank.args, rank.returncode, out, err)
        for rank, (out, err) in zip(ranks, outputs, strict=True)
    ]


def rank_report(done: subprocess.CompletedProcess[str]) -> Any:
    """The JSON a rank printed on its one ``REPORT `` line."""
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    return json.loads(line[len("REPORT ") :])
