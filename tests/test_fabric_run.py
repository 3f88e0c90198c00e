"""`fabric run` launches a Fabric script on emulated HPUs through a vendor strategy name (issue 12)."""

import shutil
import socket
import sys
from pathlib import Path

SCRIPT = """
import torch
from lightning.fabric import Fabric
fabric = Fabric()
model = torch.nn.Linear(4, 2)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
line = [fabric.global_rank, fabric.world_size, type(fabric.accelerator).__name__, type(fabric.strategy).__name__]
with open(f"rank{fabric.global_rank}.txt", "w") as f:
    f.write(" ".join(map(str, line)))
# As torch asks of every script that joined a process group: a gloo group (the emulated HCCL's transport) left to the
# interpreter's exit can abort the process there ("terminate called without an active exception").
torch.distributed.destroy_process_group()
"""


def _explain(stderr: str) -> str:
    # The ranks write to torchrun's stderr, before its own long traceback: keep their notable lines too.
    notable = [line for line in stderr.splitlines() if any(w in line for w in ("terminate", "Error", "rror:", "Abort"))]
    return "\n".join(notable[-40:]) + "\n--- the end of stderr ---\n" + stderr[-2000:]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_fabric_run_with_a_vendor_strategy(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "train.py").write_text(SCRIPT)
    fabric = shutil.which("fabric", path=str(Path(sys.executable).parent)) or "fabric"
    args = ["-c", f"import sys; sys.argv[0] = {fabric!r}; from lightning.fabric.cli import _main; _main()"]
    process = run(
        # A free port: torchrun's default (29400) is taken while another run of this suite is under way.
        [*args, "run", "--strategy", "hpu_parallel", "--devices", "2", "--main-port", str(_free_port()), "train.py"],
        # torchrun keeps a log folder (torchelastic_*) in the temporary folder: the test's own, not the user's.
        env={"LIGHTNING_ACCEL_EMULATE": "hpu", "TMPDIR": str(tmp_path)},
        cwd=tmp_path,
    )
    assert process.returncode == 0, _explain(process.stderr)
    # Each rank reports into its own file: two ranks printing to one pipe interleave their writes.
    reports = sorted(path.read_text() for path in tmp_path.glob("rank*.txt"))
    assert reports == ["0 2 HPUAccelerator HPUParallelStrategy", "1 2 HPUAccelerator HPUParallelStrategy"]
