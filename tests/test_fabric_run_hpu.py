"""`lightning-accel fabric run --accelerator hpu`: Lightning's `fabric run` (which refuses "hpu") for plugin devices."""

import socket
from pathlib import Path

SCRIPT = """
import sys
import torch
from lightning.fabric import Fabric
fabric = Fabric()
model = torch.nn.Linear(4, 2)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
total = fabric.all_reduce(torch.tensor([fabric.global_rank + 1.0], device=fabric.device), reduce_op="sum")
line = [fabric.global_rank, fabric.world_size, type(fabric.accelerator).__name__, type(fabric.strategy).__name__,
        fabric.device.type, type(fabric.strategy.precision).__name__, total.item(), *sys.argv[1:]]
with open(f"rank{fabric.global_rank}.txt", "w") as f:
    f.write(" ".join(map(str, line)))
# As torch asks of every script that joined a process group (see test_fabric_run.py).
torch.distributed.destroy_process_group()
"""

CLI = ["-m", "lightning_accel.core.cli", "fabric", "run"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_fabric_run_on_two_emulated_hpus(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "train.py").write_text(SCRIPT)
    options = ["--accelerator", "hpu", "--devices", "2", "--precision", "bf16-mixed"]
    process = run(
        [*CLI, *options, "--main-port", str(_free_port()), "train.py", "--lr", "0.1"],
        # torchrun keeps a log folder (torchelastic_*) in the temporary folder: the test's own, not the user's.
        env={"LIGHTNING_ACCEL_EMULATE": "hpu", "TMPDIR": str(tmp_path)},
        cwd=tmp_path,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    reports = sorted(path.read_text() for path in tmp_path.glob("rank*.txt"))
    # No strategy given: Fabric picks the HPU's data-parallel strategy for two devices, as for GPUs; the script's own
    # arguments reach it.
    assert reports == [f"{rank} 2 HPUAccelerator HPUParallelStrategy hpu HPUPrecision 3.0 --lr 0.1" for rank in (0, 1)]


def test_lightnings_fabric_run_refuses_hpu_and_ours_names_the_accepted(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {"LIGHTNING_ACCEL_EMULATE": "hpu", "LIGHTNING_ACCEL_EMULATED_DEVICES": "4"}
    lightning = run(
        ["-c", "from lightning.fabric.cli import _main; _main()", "run", "--accelerator", "hpu", "train.py"],
        env=env,
        cwd=tmp_path,
    )
    assert lightning.returncode != 0 and "'hpu' is not one of" in lightning.stderr  # why this command exists
    ours = run([*CLI, "--accelerator", "hpux", "train.py"], env=env, cwd=tmp_path)
    assert ours.returncode == 2
    assert "--accelerator 'hpux' is not known. Accepted: Lightning's cpu, gpu, cuda, mps, tpu, auto" in ours.stderr
    assert "the installed plugins' hpu" in ours.stderr
    too_many = run([*CLI, "--accelerator", "hpu", "--devices", "99", "train.py"], env=env, cwd=tmp_path)
    assert too_many.returncode == 2
    assert "--devices 99 asks for more HPUs than this node has (4). Pass --devices 4 or fewer" in too_many.stderr
    assert not list(tmp_path.glob("rank*.txt"))
