"""torch's PowerSGD comm hook trains two real processes over "hccl", past the iteration where it starts compressing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch
from _habana_helpers import PYTHON, SCRIPTS, free_port, script_env

SCRIPT = str(SCRIPTS / "powersgd_fit.py")
START_ITER = 2  # the script's start_powerSGD_iter
STEPS = 8  # the script's limit_train_batches, one epoch


def test_powersgd_trains_two_ranks_past_its_start_iteration(tmp_path: Path) -> None:
    # Written as for GPUs (ddp_comm_state=PowerSGDState(...), ddp_comm_hook=powerSGD_hook), on HPUs. Its compressed
    # steps multiply the all-reduced factors (bmm) with the gradients: the works' futures must give back HPU tensors.
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    done = subprocess.run(
        [PYTHON, SCRIPT, "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in range(2)]
    for result in results:
        assert result["backend"] == "hccl"
        assert result["powersgd_iter"] == STEPS > START_ITER  # the hook ran each step, compressing from the third
        assert result["p_devices"] == result["error_devices"] == ["hpu"]  # its factors and error feedback
        losses = result["losses"]
        assert len(losses) == STEPS
        assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.2  # it learns
    # Every rank applied the same all-reduced (compressed) gradients: the replicas agree.
    reference, other = (result["state_dict"] for result in results)
    for name, tensor in reference.items():
        torch.testing.assert_close(other[name], tensor, msg=f"{name} differs across ranks")
