"""DeepSpeed ZeRO-2 on two HPUs through Ray Train (RayHPUDeepSpeedStrategy), with the DDP run's data and model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _ray_helpers import STEPS_PER_EPOCH, assert_same_weights, train, worker_reports

pytestmark = pytest.mark.slow


def test_zero2_trains_on_two_workers_over_hccl_like_ddp(uninterrupted: Path, tmp_path: Path) -> None:
    train("zero2", tmp_path)
    rank0, rank1 = worker_reports(tmp_path, "zero2", attempt=0)
    for report in (rank0, rank1):
        assert report["seen"] == [("hpu", "hpu", "hccl")]
        assert report["visible_hpus"] == 1
        assert report["steps_run"] == 2 * STEPS_PER_EPOCH
    assert_same_weights(rank1["weights"], rank0["weights"])
    # ZeRO-2 partitions the optimizer state and gradients, not the update: DDP's weights, up to summation order.
    ddp = worker_reports(uninterrupted, "whole", attempt=0)[0]["weights"]
    for name, weight in rank0["weights"].items():
        torch.testing.assert_close(weight, ddp[name], msg=name)
    # Each worker's optimizer-state shard went into the reported checkpoint.
    shards = sorted(p.name for p in (tmp_path / "storage").rglob("zero_pp_rank_*_optim_states.pt"))
    assert {"zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= set(shards)
