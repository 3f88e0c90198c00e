"""Lightning on two HPUs through Ray Train: HCCL, identical weights, reported checkpoints, a worker killed mid-epoch.

Each run is a child process with its own local Ray cluster (``scripts/train_on_ray.py``): two workers, one HPU each,
``TorchConfig(backend="hccl")``, ``RayHPUStrategy``, ``RayLightningEnvironment``, ``RayTrainReportCallback`` and
``prepare_trainer``, as Ray's docs show Lightning. Training is deterministic (fixed data order, no dropout), so resumed
and restarted runs must end with the uninterrupted run's weights exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _ray_helpers import STEPS_PER_EPOCH, assert_same_weights, train, worker_reports

pytestmark = pytest.mark.slow


def test_two_workers_train_on_their_hpus_over_hccl_and_agree(uninterrupted: Path) -> None:
    rank0, rank1 = worker_reports(uninterrupted, "whole", attempt=0)
    for report in (rank0, rank1):
        # (batch device, module device, process group backend), as seen inside training_step at every step.
        assert report["seen"] == [("hpu", "hpu", "hccl")]
        assert report["visible_hpus"] == 1
        assert report["root_device"] == "hpu"
        assert report["steps_run"] == 2 * STEPS_PER_EPOCH
    # Each worker reserved its own card.
    assert rank0["visible_modules"] != rank1["visible_modules"]
    # The workers trained on different halves of the data: only the gradients' all-reduce makes them agree.
    assert_same_weights(rank1["weights"], rank0["weights"])


def test_resuming_from_a_reported_checkpoint_ends_with_the_uninterrupted_weights(uninterrupted: Path) -> None:
    train("resume", uninterrupted)  # restores the checkpoint the uninterrupted run reported after its first epoch
    expected = worker_reports(uninterrupted, "whole", attempt=0)[0]["weights"]
    for report in worker_reports(uninterrupted, "resume", attempt=0):
        assert report["steps_run"] == STEPS_PER_EPOCH  # the second epoch only: it did start from the checkpoint
        assert_same_weights(report["weights"], expected)


def test_a_worker_killed_mid_epoch_is_restarted_and_the_run_ends_with_the_uninterrupted_weights(
    uninterrupted: Path, tmp_path: Path
) -> None:
    train("crash", tmp_path)  # FailureConfig(max_failures=1); rank 1 is killed by SIGKILL in the second epoch
    assert (tmp_path / "crashed-once").read_text() == "killed"
    # The first attempt never finished: no worker of it wrote its final weights.
    assert not list(tmp_path.glob("crash-rank*-attempt0.pt"))
    expected = worker_reports(uninterrupted, "whole", attempt=0)[0]["weights"]
    for report in worker_reports(tmp_path, "crash", attempt=1):
        # Restarted from the last reported checkpoint (end of the first epoch), not from scratch.
        assert report["steps_run"] == STEPS_PER_EPOCH
        assert_same_weights(report["weights"], expected)
