"""The emulated "hccl" is a registered c10d backend, as the SDK's: torch.distributed's functions stay torch's own.

Collectives of every path (torch.distributed's functions, functional collectives, DDP's C++ reducer and its comm hooks)
reach c10d's operators on the HPU key, as on Gaudi; the reduce operations HCCL lacks are refused on each, and works'
futures complete with HPU tensors. Two real processes each.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from _emulator_helpers import PYTHON, rank_report, run_rank_pair, script_env

pytestmark = pytest.mark.emulator_only  # fresh processes, with and without the emulated SDK

FUNCTIONS = r"""
import inspect, json, sys
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
if sys.argv[1] == "on":
    import habana_frameworks.torch  # noqa: F401  (the load, in lazy mode; eager mode loaded at import torch)
report = {}
for label, module in (("torch.distributed", dist), ("distributed_c10d", c10d)):
    for name, value in vars(module).items():
        if inspect.isfunction(value):
            report[f"{label}.{name}"] = f"{value.__code__.co_filename}:{value.__code__.co_firstlineno}"
print(json.dumps(report))
"""


def _functions(emulated: bool) -> dict[str, str]:
    env = script_env()
    if not emulated:
        env.pop("LIGHTNING_ACCEL_EMULATE", None)
    done = subprocess.run(
        [PYTHON, "-c", FUNCTIONS, "on" if emulated else "off"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_only_the_sdks_own_wrappers_replace_torch_distributed_functions(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "1" if mode == "lazy" else "0")
    off, on = _functions(emulated=False), _functions(emulated=True)
    assert set(off) == set(on)  # nothing added, nothing removed
    replaced = sorted(name for name in off if off[name] != on[name])
    # The SDK's own load effects (bcc5172 core/torch_overwrites.py:117-129 and :187-277), nothing else.
    assert replaced == [
        "distributed_c10d._get_pg_default_device",
        "torch.distributed.init_process_group",
        "torch.distributed.new_group",
    ]


RANK = r"""
import json, sys
from datetime import timedelta
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import habana_frameworks.torch  # noqa: F401

rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group(
    "hccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=123)
)
report = {}
world = dist.group.WORLD
backend = world._get_backend(torch.device("hpu"))
report["backend"] = [dist.get_backend(), type(backend).__name__, backend.options._timeout.total_seconds()]
x = torch.full((3,), float(rank + 1), device="hpu")
dist.all_reduce(x)
report["all_reduce"] = x.cpu().tolist()
value = dist.all_reduce(x, async_op=True).get_future().wait()
report["future"] = [[t.device.type for t in value], [t.cpu().tolist() for t in value]]
report["future_is_the_tensor"] = value[0].data_ptr() == x.data_ptr()
report["functional_sum"] = funcol.all_reduce(x, "sum", world).cpu().tolist()


def refused(call):
    try:
        call()
    except (RuntimeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


avg = dist.ReduceOp.AVG
report["refused"] = {
    "all_reduce": refused(lambda: dist.all_reduce(x, op=avg)),
    "all_reduce_async": refused(lambda: dist.all_reduce(x, op=avg, async_op=True).wait()),
    "reduce_scatter_tensor": refused(
        lambda: dist.reduce_scatter_tensor(torch.empty(1, device="hpu"), torch.ones(2, device="hpu"), op=avg)
    ),
    "reduce": refused(lambda: dist.reduce(x, 0, op=dist.ReduceOp.BXOR)),
    "functional": refused(lambda: funcol.all_reduce(x, "avg", world)),
    "c10d_functional": refused(
        lambda: torch.ops._c10d_functional.wait_tensor(
            torch.ops._c10d_functional.all_reduce(x, "avg", world.group_name)
        )
    ),
    "host_tensor": refused(lambda: dist.all_reduce(torch.ones(2))),
}


def avg_hook(state, bucket):
    return dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.AVG, async_op=True).get_future().then(
        lambda fut: fut.value()[0]
    )


def ddp_step(hook):
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2).to("hpu"))
    if hook is not None:
        model.register_comm_hook(None, hook)
    model(torch.full((3, 4), float(rank + 1), device="hpu")).sum().backward()
    return model.module.weight.grad


report["ddp_grad"] = ddp_step(None).cpu().tolist()  # the reducer's own all-reduce, from C++
report["refused"]["ddp_comm_hook"] = refused(lambda: ddp_step(avg_hook))
objects = [{"from": rank}]
dist.broadcast_object_list(objects, src=0)
gathered = [None, None]
dist.all_gather_object(gathered, rank * 10)
report["objects"] = [objects, gathered]
rows = torch.empty(1, 6, device="hpu")  # filled rank after rank in memory, as SyncBatchNorm's gather expects
dist.all_gather_into_tensor(rows, torch.full((3,), float(rank), device="hpu"))
report["gather_rows"] = rows.cpu().tolist()
grid = torch.empty(2, 6, device="hpu")  # one row per rank, each rank's (2, 3) block laid out in it
dist.all_gather_into_tensor(grid, torch.full((2, 3), float(rank), device="hpu"))
report["gather_grid"] = grid.cpu().tolist()
dist.barrier()
if rank == 0:
    dist.send(torch.arange(3.0, device="hpu"), 1)
else:
    received = torch.empty(3, device="hpu")
    dist.recv(received, 0)
    report["received"] = received.cpu().tolist()
dist.destroy_process_group()
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def reports() -> list[dict]:
    ranks = run_rank_pair(RANK)
    assert [rank.returncode for rank in ranks] == [0, 0], "\n".join(rank.stderr[-3000:] for rank in ranks)
    return [rank_report(rank) for rank in ranks]


def test_collectives_run_on_hpu_tensors_and_futures_give_them_back(reports: list[dict]) -> None:
    for report in reports:
        assert report["backend"] == ["hccl", "ProcessGroupHCCL", 123.0]
        assert report["all_reduce"] == [3.0, 3.0, 3.0]
        assert report["future"] == [["hpu"], [[6.0, 6.0, 6.0]]]
        assert report["future_is_the_tensor"] is True
        assert report["functional_sum"] == [12.0, 12.0, 12.0]
        assert report["ddp_grad"] == [[4.5] * 4, [4.5] * 4]  # (3 * 1 + 3 * 2) / 2 ranks, per weight
        assert report["objects"] == [[{"from": 0}], [0, 10]]
        assert report["gather_rows"] == [[0.0, 0.0, 0.0, 1.0, 1.0, 1.0]]
        assert report["gather_grid"] == [[0.0] * 6, [1.0] * 6]
    assert reports[1]["received"] == [0.0, 1.0, 2.0]


def test_the_reduce_operations_hccl_lacks_are_refused_on_every_path(reports: list[dict]) -> None:
    def message(name: str) -> str:
        return (
            f"ValueError: op=ReduceOp.{name} is not supported by the 'hccl' backend: HCCL reduces with "
            "ReduceOp.MIN, ReduceOp.MAX, ReduceOp.SUM, ReduceOp.PRODUCT only. For an average, reduce with "
            "ReduceOp.SUM and divide by the world size."
        )

    for report in reports:
        refused = report["refused"]
        for path in ("all_reduce", "all_reduce_async", "reduce_scatter_tensor", "functional", "c10d_functional"):
            assert refused[path] == message("AVG"), path
        assert refused["reduce"] == message("BXOR")
        # DDP runs the hook from C++ and reports its failure in its own words, with HCCL's message inside.
        assert message("AVG").partition(": ")[2] in refused["ddp_comm_hook"]
        # A host tensor finds no backend in an "hccl" group (it serves "hpu" only), in torch's words.
        assert refused["host_tensor"] == "RuntimeError: No backend type associated with device type cpu"


PEER_DIES = r"""
import json, os, sys
import torch
import torch.distributed as dist
import habana_frameworks.torch  # noqa: F401

rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("hccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
x = torch.ones(3, device="hpu")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 2).to("hpu"))  # broadcasts while both live
dist.all_reduce(x)
if rank == 1:
    os._exit(0)  # gone, without a word to its group


def failure(call):
    try:
        call()
    except RuntimeError as exc:
        return str(exc)
    return "returned"


report = {
    "sync": failure(lambda: dist.all_reduce(x)),
    "async_wait": failure(lambda: dist.all_reduce(x, async_op=True).wait()),
    "future": failure(lambda: dist.all_reduce(x, async_op=True).get_future().wait()),
    "ddp_backward": failure(lambda: model(x).sum().backward()),
}
print("REPORT " + json.dumps(report), flush=True)
os._exit(0)  # the group lost its peer: not ended
"""


def test_a_collective_whose_peer_died_fails_on_every_path() -> None:
    # Each path fails with gloo's error, as HCCL's fails with its own: not a wait() that returns as if the collective
    # succeeded, and not a crash of DDP's reducer (C++, on autograd's thread) before anyone could say what happened.
    first, _ = run_rank_pair(PEER_DIES)
    assert first.returncode == 0, first.stderr[-3000:]
    report = rank_report(first)
    for path, message in report.items():
        assert "Connection closed by peer" in message or "Connection reset by peer" in message, (path, message)
