"""A ZeRO setup trains two steps of a small language model with HPUDeepSpeedStrategy on two emulated HPUs.

Rank N writes OUT/rankN.json: the device memory's peak over the second step (``torch.hpu.max_memory_allocated``
after a reset at the step's start, as the pre-flight run reads it) and the run's ZeRO and bf16/fp16 config.

Usage: ``preflight_zero_memory.py OUT SETUP [PRECISION]``, SETUP one of the pre-flight report's ZeRO strategies
(``zero1``, ``zero2_offload``...), PRECISION Lightning's ``precision=`` (default: 32-true). One setup per process:
DeepSpeed's engine outlives ``Trainer.fit`` in the process, so a second run would start with the first one's buffers
still allocated.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from lightning.pytorch import Trainer

from lightning_accel.deepspeed_hpu import HPUDeepSpeedStrategy

# The model and measurement of packages/habana/tests/test_preflight_memory.py: one model for every strategy's check.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "habana" / "tests"))
from _memory_model import PeakOfSecondStep, TinyLM

# DeepSpeed's gradient buckets, in elements: 1 MiB each in float32, not the 800 MB each of the defaults (2e8
# elements), which would dwarf this model's states and make any prediction of them "within 10%".
BUCKET = 2**18


def main() -> None:
    out, setup = sys.argv[1], sys.argv[2]
    precision = sys.argv[3] if len(sys.argv) > 3 else "32-true"
    stage, offload = int(setup[len("zero")]), setup.endswith("_offload")
    strategy = HPUDeepSpeedStrategy(
        stage=stage,
        offload_optimizer=offload,
        offload_parameters=offload and stage == 3,
        reduce_bucket_size=BUCKET,
        allgather_bucket_size=BUCKET,
    )
    peak = PeakOfSecondStep()
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy=strategy,
        max_steps=2,
        precision=precision,
        callbacks=[peak],
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(TinyLM(host_optimizer=offload))
    # The config the run used, for the prediction to read its ZeRO settings.
    config = {key: strategy.config[key] for key in ("zero_optimization", "bf16", "fp16") if key in strategy.config}
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as handle:
        json.dump({"peak": peak.peak, "config": config}, handle)
    # Gloo's threads can abort the interpreter at exit while the group is alive; end it first.
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
