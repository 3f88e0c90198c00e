"""A collective on HPU tensors never needs the GIL on gloo's worker thread, so a process may end right after one.

The emulated "hccl" kernels are C++ (emulated_hpu/csrc/distributed/HostCollectives.cpp): gloo's worker thread completes
the work's future and drops its work without any Python object. A Python object there (a Python kernel's host views, a
Python callback on the future) made the thread take the GIL after the caller's wait() returned; when the interpreter
was already finalizing, the process aborted ("terminate called without an active exception", exit status 134), as a
Lightning run did at exit after its per-step broadcast. Two real processes each.
"""

from __future__ import annotations

import pytest
from _emulator_helpers import rank_report, run_rank_pair

pytestmark = pytest.mark.emulator_only  # fresh processes with the emulated SDK

LAST_COLLECTIVE = r"""
import sys
import torch
import torch.distributed as dist
import habana_frameworks.torch  # noqa: F401

rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("hccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
x = torch.ones(4, device="hpu")
dist.barrier()
# The main thread keeps the GIL from here on, so it reaches the interpreter's exit while gloo's thread still finishes.
sys.setswitchinterval(100)
dist.all_reduce(x)
"""

PAIRS = 8


def test_processes_whose_last_statement_is_a_collective_exit_cleanly() -> None:
    """Statistical: the abort this guards against hit about 1 run in 8 on a loaded 2-core machine, so 8 pairs run.

    A pass does not prove the absence of the race; a failure is always real (an exit status other than 0).
    """
    statuses = []
    for _ in range(PAIRS):
        ranks = run_rank_pair(LAST_COLLECTIVE)
        statuses.append([rank.returncode for rank in ranks])
        assert statuses[-1] == [0, 0], (statuses, "\n".join(rank.stderr[-3000:] for rank in ranks))


HELD_GIL = r"""
import json, sys
import torch
import torch.distributed as dist
import habana_frameworks.torch  # noqa: F401

rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("hccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
x = torch.full((3,), float(rank + 1), device="hpu")
rows = torch.empty(1, 6, device="hpu")
dist.barrier()
report = {}
sys.setswitchinterval(100_000)  # this thread gives the GIL up only when it waits: not in the loops below
work = dist.all_reduce(x, async_op=True)
while not work.is_completed():  # completes only if gloo's thread never needs the GIL
    pass
value = work.get_future().value()
report["all_reduce"] = [[t.device.type for t in value], [t.data_ptr() == x.data_ptr() for t in value]]
report["sum"] = x.cpu().tolist()
work = dist.all_gather_into_tensor(rows, torch.full((3,), float(rank), device="hpu"), async_op=True)
while not work.is_completed():
    pass
value = work.get_future().value()
report["gather"] = [rows.cpu().tolist(), sorted({t.device.type for t in value})]
sys.setswitchinterval(0.005)
del work, value
start = torch.hpu.memory_allocated()
y = torch.ones(1000, device="hpu")
work = dist.all_reduce(y, async_op=True)
work.wait()
del y, work
objects = [{"step": 1}] if rank == 0 else [None]
dist.broadcast_object_list(objects, src=0)  # stages its bytes in HPU tensors it drops on return
report["memory_after_drop"] = torch.hpu.memory_allocated() - start
# The input of all_to_all_single is not in its work's future: once waited, the work (kept here) holds none of it.
inp, out = torch.ones(1000, device="hpu"), torch.empty(1000, device="hpu")
work = dist.all_to_all_single(out, inp, async_op=True)
work.wait()
held = torch.hpu.memory_allocated()
del inp
report["input_freed_while_work_lives"] = held - torch.hpu.memory_allocated()
del work
dist.destroy_process_group()
print("REPORT " + json.dumps(report))
"""


def test_a_collective_completes_while_the_caller_holds_the_gil_and_frees_its_memory_when_dropped() -> None:
    # Each rank spins on work.is_completed() (which keeps the GIL) with the GIL's switch interval far beyond the run:
    # a completion that needed the GIL on gloo's thread (a Python callback on the work's future) would never come,
    # and the run would hit the timeout below instead.
    ranks = run_rank_pair(HELD_GIL)
    assert [rank.returncode for rank in ranks] == [0, 0], "\n".join(rank.stderr[-3000:] for rank in ranks)
    for rank in ranks:
        report = rank_report(rank)
        # The future completes with HPU tensors over the caller's memory, as HCCL's completes with the caller's.
        assert report["all_reduce"] == [["hpu"], [True]]
        assert report["sum"] == [3.0, 3.0, 3.0]
        assert report["gather"] == [[[0.0, 0.0, 0.0, 1.0, 1.0, 1.0]], ["hpu"]]
        # Once the caller has waited, nothing of a collective holds its tensors' memory: it is free when the caller
        # drops them, not when gloo's worker thread drops its work.
        assert report["memory_after_drop"] == 0
        assert report["input_freed_while_work_lives"] == 4000
