"""The checks ``lightning-accel selftest --hpu`` runs for lightning-accel-habana (named by the plugin spec).

Cheap to import: the checks name their functions by path. Checks that need the SDK loaded in another mode or with
operator lists declare the variables the SDK reads at load; they run in a process started with them.

Example:
    >>> from lightning_accel.habana.selftest import CHECKS
    >>> [check.name for check in CHECKS][:2]
    ['hpu.fit', 'hpu.ddp']
"""

from __future__ import annotations

from pathlib import Path

from lightning_accel.core.selftest.checks import Check

__all__ = ["CHECKS"]

_CHECKS = "lightning_accel.habana._selftest.checks"
_DATA = Path(__file__).parent / "_selftest"

CHECKS = (
    Check("hpu.fit", "hpu", f"{_CHECKS}:fit", "one HPU trains a classifier to a real accuracy"),
    Check("hpu.ddp", "hpu", f"{_CHECKS}:ddp", "DDP over HCCL on every HPU, one process each: identical weights"),
    Check("hpu.checkpoint", "hpu", f"{_CHECKS}:checkpoint", "a checkpoint saves and training resumes from it"),
    Check("hpu.profiler", "hpu", f"{_CHECKS}:profiler", "HPUProfiler writes a trace with the training's operators"),
    Check(
        "hpu.fsdp",
        "hpu",
        f"{_CHECKS}:fsdp",
        "FSDP (strategy='hpu_fsdp') over two HPUs trains",
        {"PT_HPU_LAZY_MODE": "0"},  # FSDP on Gaudi runs in eager mode only (an SDK before 1.21 loads lazy by default)
    ),
    Check("hpu.fp8", "hpu", f"{_CHECKS}:fp8", "fp8: HPUPrecisionPlugin(precision='fp8') with converted layers trains"),
    Check(
        "hpu.bf16",
        "hpu",
        f"{_CHECKS}:bf16",
        "bf16-mixed with operator lists: each operator runs in the listed dtype",
        # The SDK reads its lists once, when it loads: the process must start with them.
        {
            "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST": str(_DATA / "ops_bf16.txt"),
            "PT_HPU_AUTOCAST_FP32_OPS_LIST": str(_DATA / "ops_fp32.txt"),
        },
    ),
    Check(
        "hpu.graphs",
        "hpu",
        f"{_CHECKS}:graphs",
        "HPU graphs: a captured training step replays, graphed prediction is right",
        {"PT_HPU_LAZY_MODE": "1"},  # the SDK exports the graph APIs in lazy mode only
    ),
    Check(
        "hpu.compile",
        "hpu",
        f"{_CHECKS}:compile",
        "torch.compile(backend='hpu_backend') trains",
        {"PT_HPU_LAZY_MODE": "0"},  # torch.compile runs in eager mode only
    ),
    Check(
        "hpu.model_parallel",
        "hpu",
        f"{_CHECKS}:model_parallel",
        "FSDP2 (strategy='hpu_model_parallel', fully_shard) over two HPUs: HPU shards, the model learns",
        {"PT_HPU_LAZY_MODE": "0"},  # FSDP2 on Gaudi runs in eager mode only; shares hpu.compile's process
    ),
)
