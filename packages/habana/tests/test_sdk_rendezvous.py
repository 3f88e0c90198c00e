"""Runs rendezvous where the user's launcher says, not on the SDK's defaults.

Loading the SDK (at ``import torch`` in eager mode) sets ``MASTER_ADDR=localhost`` and ``MASTER_PORT=12345`` when the
ranks are not all known (gaudi-pytorch-bridge 1.19.0 ``distributed/hccl/__init__.py:60-81,113``), and Lightning's
SLURM and Lightning environments prefer those variables to their own choice. The HCCL strategies take them back out
unless the user set them (issue 22, item 2).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from _habana_helpers import PYTHON, SCRIPTS, script_env

SCRIPT = str(SCRIPTS / "ddp_fit.py")


def _results(out: Path, world_size: int) -> list[dict[str, Any]]:
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def _free_slurm_port() -> tuple[str, int]:
    """A SLURM job id whose port (Lightning: 15000 + the job id's last four digits) is free now."""
    for offset in range(10000):
        port = 15000 + (offset * 3889) % 10000  # spread the probes, so parallel runs do not try the same port first
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return f"7{port - 15000:04d}", port
    pytest.fail("no free port between 15000 and 24999")


def _communicate(nodes: list[subprocess.Popen[str]]) -> None:
    outputs = [node.communicate(timeout=300) for node in nodes]
    for node, (_, stderr) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, stderr[-4000:]


@pytest.mark.slow
def test_two_slurm_nodes_rendezvous_on_the_slurm_master_not_the_sdks_localhost(tmp_path: Path) -> None:
    # What srun gives each task of `srun --nodes=2 --ntasks-per-node=1`, and no MASTER_ADDR/MASTER_PORT: Lightning's
    # SLURMEnvironment takes the first node of SLURM_NODELIST and a port from the job id. The SDK, loaded at
    # `import torch` in each task, writes localhost:12345 first.
    job_id, port = _free_slurm_port()
    nodes = []
    for node_rank in (0, 1):
        env = {k: v for k, v in script_env().items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
        env.update(
            SLURM_NTASKS="2",
            SLURM_NTASKS_PER_NODE="1",
            SLURM_PROCID=str(node_rank),
            SLURM_LOCALID="0",
            SLURM_NODEID=str(node_rank),
            SLURM_NODELIST="127.0.0.1,127.0.0.2",
            SLURM_JOB_NAME="train",
            SLURM_JOB_ID=job_id,
        )
        command = [PYTHON, SCRIPT, "--out", str(tmp_path), "--devices", "1", "--num-nodes", "2"]
        nodes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    _communicate(nodes)
    results = _results(tmp_path, 2)
    assert [r["environment"] for r in results] == ["SLURMEnvironment"] * 2
    assert [r["rendezvous"] for r in results] == [("127.0.0.1", str(port))] * 2
    assert [r["world_size"] for r in results] == [2, 2] and [r["sum"] for r in results] == [3.0, 3.0]


@pytest.mark.slow
def test_two_single_node_jobs_started_at_once_on_one_machine_both_finish(tmp_path: Path) -> None:
    # Two users' jobs on one Gaudi machine, the cards split with HABANA_VISIBLE_MODULES, no MASTER_PORT given: each
    # Lightning launcher must pick a free port, not the SDK's 12345 for both.
    jobs = []
    for job, modules in enumerate(("0,1", "2,3")):
        out = tmp_path / f"job{job}"
        out.mkdir()
        env = {k: v for k, v in script_env().items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
        env["HABANA_VISIBLE_MODULES"] = modules
        command = [PYTHON, SCRIPT, "--out", str(out), "--devices", "2"]
        jobs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    _communicate(jobs)
    ports = set()
    for job, modules in enumerate(("0,1", "2,3")):
        results = _results(tmp_path / f"job{job}", 2)
        assert [r["sum"] for r in results] == [3.0, 3.0]
        assert [r["hls_module_id"] for r in results] == modules.split(",")
        ((_address, port),) = {tuple(r["rendezvous"]) for r in results}
        assert port != "12345"
        ports.add(port)
    assert len(ports) == 2


@pytest.mark.parametrize(
    ("at_start", "now", "kept"),
    [
        ({"MASTER_ADDR": None, "MASTER_PORT": None}, {"MASTER_ADDR": "localhost", "MASTER_PORT": "12345"}, {}),
        (  # the user's own values, even where they are the SDK's defaults
            {"MASTER_ADDR": "localhost", "MASTER_PORT": "12345"},
            {"MASTER_ADDR": "localhost", "MASTER_PORT": "12345"},
            {"MASTER_ADDR": "localhost", "MASTER_PORT": "12345"},
        ),
        (  # set in the script after start, to something else than the defaults
            {"MASTER_ADDR": None, "MASTER_PORT": None},
            {"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "12345"},
            {"MASTER_ADDR": "10.0.0.7"},
        ),
    ],
)
def test_only_the_sdks_defaults_are_taken_out(
    clean_env: pytest.MonkeyPatch, at_start: dict[str, str | None], now: dict[str, str], kept: dict[str, str]
) -> None:
    import _lightning_accel_autoload

    from lightning_accel.habana._distributed_env import forget_sdk_rendezvous_defaults

    clean_env.setattr(_lightning_accel_autoload, "_AT_START", at_start)
    for name, value in now.items():
        clean_env.setenv(name, value)
    forget_sdk_rendezvous_defaults()
    assert {name: os.environ[name] for name in now if name in os.environ} == kept
