"""Real multi-process training over the emulated "hccl" backend (gloo underneath): one node and two nodes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from _habana_helpers import PYTHON, SCRIPTS, free_port, script_env

import lightning_accel.habana  # noqa: F401

SCRIPT = str(SCRIPTS / "ddp_fit.py")


def _results(out: Path, world_size: int) -> list[dict[str, Any]]:
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def _check_same_training(results: list[dict[str, Any]], world_size: int) -> None:
    assert [r["backend"] for r in results] == ["hccl"] * world_size
    assert [r["world_size"] for r in results] == [world_size] * world_size
    expected_sum = float(sum(range(1, world_size + 1)))
    assert [r["sum"] for r in results] == [expected_sum] * world_size
    assert [r["host_sum"] for r in results] == [("cpu", expected_sum)] * world_size  # reduced through the HPU
    assert [r["max"] for r in results] == [float(world_size)] * world_size
    assert [r["mean"] for r in results] == [expected_sum / world_size] * world_size
    assert [r["broadcast"] for r in results] == ["from-rank-0"] * world_size
    assert [r["devices"] for r in results] == [["hpu", "hpu"]] * world_size  # batch and module, as on Gaudi
    reference = results[0]["state_dict"]
    for other in results[1:]:
        for name, tensor in reference.items():
            assert torch.equal(other["state_dict"][name], tensor), f"{name} differs across ranks"


@pytest.mark.parametrize(
    "selection",
    [
        [],
        ["--by-name"],
        ["--by-name", "--strategy", "ddp"],
        ["--by-name", "--strategy", "ddp_find_unused_parameters_true"],
        ["--static-graph"],
    ],
    ids=["instances", "by-name", "lightnings-ddp", "lightnings-ddp-unused", "static-graph"],
)
def test_two_processes_train_in_lockstep(tmp_path: Path, selection: list[str]) -> None:
    # Lightning's own names ("ddp", "ddp_find_unused_parameters_true") select HPUParallelStrategy with
    # accelerator="hpu", as a script written for GPUs passes them.
    temporary = tmp_path / "temporary"
    temporary.mkdir()
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), TMPDIR=str(temporary))
    command = [PYTHON, SCRIPT, "--out", str(tmp_path), "--devices", "2", *selection]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    assert not list(temporary.glob("lightning-accel-*")), list(temporary.iterdir())  # the run's state file is removed
    # The strategy ended its "hccl" group before the interpreter's teardown (left to it, the group's threads can abort
    # a rank after a run that succeeded).
    exits = [json.loads((tmp_path / f"rank{rank}.exit.json").read_text()) for rank in range(2)]
    assert exits == [{"group_alive": False}] * 2
    results = _results(tmp_path, 2)
    _check_same_training(results, 2)
    # Each local rank was given its own (emulated) module by initialize_distributed_hpu.
    assert [r["hls_module_id"] for r in results] == ["0", "1"]
    # DDP's static_graph=True reaches the DDP module (it needs the SDK's pinned host memory for its buckets).
    assert [r["static_graph"] for r in results] == [selection == ["--static-graph"]] * 2


def test_two_nodes_train_together(tmp_path: Path) -> None:
    port = str(free_port())
    nodes = []
    for node_rank in (0, 1):
        env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, NODE_RANK=str(node_rank), WORLD_SIZE="2")
        command = [PYTHON, SCRIPT, "--out", str(tmp_path), "--devices", "1", "--num-nodes", "2"]
        nodes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [node.communicate(timeout=240) for node in nodes]
    for node, (_, stderr) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, stderr[-4000:]
    results = _results(tmp_path, 2)
    _check_same_training(results, 2)
    assert [r["node_rank"] for r in results] == [0, 1]


@pytest.mark.parametrize("tree", ["trainer", "fabric"])
def test_a_non_hpu_accelerator_is_refused_instead_of_training_elsewhere(tree: str, tmp_path: Path) -> None:
    from lightning_accel.core.errors import ConfigurationError

    match = r"HPUParallelStrategy runs on HPUs, but the accelerator is CPUAccelerator\. Accepted: accelerator='hpu'"
    if tree == "trainer":
        from lightning.pytorch.demos.boring_classes import BoringModel

        from lightning_accel.habana import HPUParallelStrategy

        # Refused when the Trainer is built, before any rank is launched.
        with pytest.raises(ConfigurationError, match=match):
            pl.Trainer(
                accelerator="cpu", strategy=HPUParallelStrategy(), devices=1, max_steps=1, default_root_dir=tmp_path
            ).fit(BoringModel())
    else:
        from lightning.fabric import Fabric

        from lightning_accel.habana.fabric import HPUParallelStrategy as FabricHPUParallelStrategy

        with pytest.raises(ConfigurationError, match=match):
            Fabric(accelerator="cpu", strategy=FabricHPUParallelStrategy(), devices=1).launch()


DEVICE_ID_SCRIPT = """
import habana_frameworks.torch.distributed.hccl  # registers the "hccl" backend, as the SDK does
import torch
import lightning as L
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.strategies import DDPStrategy

quiet = dict(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
ddp = DDPStrategy(process_group_backend="hccl", find_unused_parameters=True)
trainer = L.Trainer(accelerator="hpu", devices=1, strategy=ddp, **quiet)
trainer.fit(BoringModel())
strategy = trainer.strategy
seen = (type(strategy).__name__, strategy.root_device, torch.distributed.get_backend(), strategy._ddp_kwargs)
print("LIGHTNING_DDP:", *seen)
"""


def test_lightnings_ddp_instance_runs_as_hpu_parallel_joining_hccl_without_device_id(tmp_path: Path) -> None:
    # Lightning's DDPStrategy passes device_id=root_device, which the SDK's init_process_group does not take (and torch
    # refuses for the index-less "hpu" every Gaudi process has): an instance of it becomes HPUParallelStrategy with its
    # arguments, which joins the process group without it.
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    process = subprocess.run(
        [PYTHON, "-c", DEVICE_ID_SCRIPT], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert process.returncode == 0, process.stderr[-3000:]
    assert "LIGHTNING_DDP: HPUParallelStrategy hpu hccl {'find_unused_parameters': True}" in process.stdout


def _two_node_env(launcher: str, node_rank: int, port: str) -> dict[str, str]:
    if launcher == "slurm":
        # What srun gives each task of `srun --nodes=2 --ntasks-per-node=1` (Lightning's SLURMEnvironment reads these).
        return script_env(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            SLURM_NTASKS="2",
            SLURM_NTASKS_PER_NODE="1",
            SLURM_PROCID=str(node_rank),
            SLURM_LOCALID="0",
            SLURM_NODEID=str(node_rank),
            SLURM_NODELIST="node[0-1]",
            SLURM_JOB_NAME="train",
            SLURM_JOB_ID="4242",
        )
    return script_env()


def _two_node_command(launcher: str, node_rank: int, port: str, out: Path) -> list[str]:
    script = [SCRIPT, "--out", str(out), "--devices", "1", "--num-nodes", "2"]
    if launcher == "torchrun":
        # torchrun's static rendezvous, as on two hosts of a Gaudi cluster.
        return [PYTHON, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", f"--node-rank={node_rank}",
                "--master-addr=127.0.0.1", f"--master-port={port}", *script]  # fmt: skip
    return [PYTHON, *script]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "slurm"])
def test_two_nodes_through_the_launchers_gaudi_clusters_use(tmp_path: Path, launcher: str) -> None:
    port = str(free_port())
    nodes = [
        subprocess.Popen(
            _two_node_command(launcher, node_rank, port, tmp_path),
            env=_two_node_env(launcher, node_rank, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node_rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=300) for node in nodes]
    for node, (_, stderr) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, stderr[-4000:]
    results = _results(tmp_path, 2)
    _check_same_training(results, 2)
    assert [r["node_rank"] for r in results] == [0, 1]
    environment = {"torchrun": "TorchElasticEnvironment", "slurm": "SLURMEnvironment"}[launcher]
    assert [r["environment"] for r in results] == [environment] * 2


def _mpi_prefix() -> Path:
    """Where the hpu_tests session installed Open MPI and mpi4py (``pip install --prefix``), apart from the tests."""
    prefix = os.environ.get("LIGHTNING_ACCEL_TEST_MPI_PREFIX")
    if not prefix:
        pytest.skip("needs LIGHTNING_ACCEL_TEST_MPI_PREFIX: `nox -s hpu_tests` installs Open MPI and mpi4py there")
    return Path(prefix)


@pytest.mark.slow
def test_two_ranks_started_by_mpirun(tmp_path: Path) -> None:
    # Open MPI launches the ranks (as on Gaudi clusters that use mpirun); Lightning's MPIEnvironment reads the ranks
    # through mpi4py and the HCCL strategy trains over them without launching processes of its own.
    prefix = _mpi_prefix()
    (site_packages,) = prefix.glob("lib/python*/site-packages")
    # --oversubscribe: two ranks whatever the number of cores; the two variables allow a root user (containers).
    env = script_env(PYTHONPATH=str(site_packages), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpirun = str(prefix / "bin" / "mpirun")
    command = [mpirun, "--oversubscribe", "-np", "2", PYTHON, SCRIPT, "--out", str(tmp_path), "--devices", "2"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    results = _results(tmp_path, 2)
    _check_same_training(results, 2)
    assert [r["environment"] for r in results] == ["MPIEnvironment"] * 2
    assert [r["hls_module_id"] for r in results] == ["0", "1"]


@pytest.mark.parametrize("hook", ["bf16", "fp16-wrapper", "post-localsgd"])
def test_ddp_communication_hooks_run_on_hpus_as_lightning_runs_them_on_gpus(tmp_path: Path, hook: str) -> None:
    # Lightning's DDPStrategy registers ddp_comm_hook / ddp_comm_wrapper only on "cuda"; on HPUs they were accepted
    # and silently ignored, and post-localSGD's default subgroups need torch.cuda.device_count().
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    command = [PYTHON, SCRIPT, "--out", str(tmp_path), "--devices", "2", "--comm-hook", hook]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    results = _results(tmp_path, 2)
    assert all(r["hook_calls"] > 0 for r in results), [r["hook_calls"] for r in results]
    if hook != "post-localsgd":  # post-localSGD lets the replicas drift between averages
        _check_same_training(results, 2)
