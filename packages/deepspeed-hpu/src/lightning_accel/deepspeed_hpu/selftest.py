"""The checks ``lightning-accel selftest --hpu`` runs for lightning-accel-deepspeed-hpu (named by the plugin spec).

Cheap to import. The four share one process: each Trainer brings DeepSpeed up on one HPU and tears it down.

Example:
    >>> from lightning_accel.deepspeed_hpu.selftest import CHECKS
    >>> [check.name for check in CHECKS]
    ['hpu.deepspeed_zero1', 'hpu.deepspeed_zero2', 'hpu.deepspeed_zero3', 'hpu.deepspeed_offload']
"""

from __future__ import annotations

from lightning_accel.core.selftest.checks import Check

__all__ = ["CHECKS"]

_CHECKS = "lightning_accel.deepspeed_hpu._selftest.checks"

CHECKS = (
    Check("hpu.deepspeed_zero1", "hpu", f"{_CHECKS}:zero1", "DeepSpeed ZeRO-1 (hpu_deepspeed_stage_1) trains"),
    Check("hpu.deepspeed_zero2", "hpu", f"{_CHECKS}:zero2", "DeepSpeed ZeRO-2 (hpu_deepspeed_stage_2) trains"),
    Check("hpu.deepspeed_zero3", "hpu", f"{_CHECKS}:zero3", "DeepSpeed ZeRO-3 (hpu_deepspeed_stage_3) trains"),
    Check(
        "hpu.deepspeed_offload",
        "hpu",
        f"{_CHECKS}:offload",
        "ZeRO-Offload (hpu_deepspeed_stage_2_offload): optimizer states on the host, stepped there",
    ),
)
