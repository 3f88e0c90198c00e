"""CI runs ``lightning-accel selftest --json`` on the emulators, from the installed wheels: every check passes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _command() -> list[str]:
    script = Path(sys.executable).parent / "lightning-accel"
    found = str(script) if script.exists() else shutil.which("lightning-accel")
    assert found, "the lightning-accel command is not installed next to this Python"
    return [found, "selftest", "--json"]


@pytest.mark.slow
def test_every_check_passes_on_the_emulators(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_ACCEL_")}
    # Eight devices, a standard Gaudi node (and the emulators' default): the DDP check runs eight ranks, each taking the
    # steps one HPU would, to the same accuracy bar (with one HPU's samples spread over 8 ranks it reached 0.84 < 0.9).
    # OMP_NUM_THREADS=1 keeps the ranks from fighting over the cores. PT_HPU_LAZY_MODE=1, as an SDK before 1.21 loads
    # by default: the checks that need eager mode (FSDP, FSDP2, compile) start their processes in it themselves.
    env.update(
        LIGHTNING_ACCEL_EMULATE="hpu,ipu",
        LIGHTNING_ACCEL_EMULATED_DEVICES="8",
        OMP_NUM_THREADS="1",
        PT_HPU_LAZY_MODE="1",
    )
    done = subprocess.run(_command(), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    report = json.loads(done.stdout)
    outcomes = {check["name"]: (check["status"], check["detail"]) for check in report["checks"]}
    problems = {name: outcome for name, outcome in outcomes.items() if outcome[0] != "passed"}
    assert not problems, json.dumps(problems, indent=2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(outcomes) >= 10
    expected = {
        "hpu.fit",
        "hpu.ddp",
        "hpu.checkpoint",
        "hpu.profiler",
        "hpu.fsdp",
        "hpu.fp8",
        "hpu.bf16",
        "hpu.graphs",
        "hpu.compile",
        "hpu.model_parallel",
        "hpu.deepspeed_zero1",
        "hpu.deepspeed_zero2",
        "hpu.deepspeed_zero3",
        "hpu.deepspeed_offload",
        "ipu.fit",
        "ipu.device_iterations",
        "ipu.replication",
        "ipu.pipeline",
        "ipu.checkpoint",
    }
    assert expected <= set(outcomes)
    assert "8 ranks over hccl, identical weights" in outcomes["hpu.ddp"][1]
    # FSDP2 over two of the eight HPUs: each rank holds half the classifier's 676 parameter elements.
    assert "2 ranks over hccl, FSDP2 shards of 338 / 676 elements on hpu" in outcomes["hpu.model_parallel"][1]
    # The report carries `lightning-accel env --json` for bug reports.
    assert report["env"]["variables"]["LIGHTNING_ACCEL_EMULATE"] == "hpu,ipu"
    assert {"lightning-accel-habana", "lightning-accel-graphcore", "lightning-accel-deepspeed-hpu"} <= set(
        report["env"]["plugins"]
    )
    assert report["summary"]["failed"] == 0 and report["summary"]["total"] == len(outcomes)
