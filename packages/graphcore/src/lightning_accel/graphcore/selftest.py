"""The checks ``lightning-accel selftest --ipu`` runs for lightning-accel-graphcore (named by the plugin spec).

Cheap to import; the checks name their functions by path and share one process.

Example:
    >>> from lightning_accel.graphcore.selftest import CHECKS
    >>> [check.name for check in CHECKS][:2]
    ['ipu.fit', 'ipu.device_iterations']
"""

from __future__ import annotations

from lightning_accel.core.selftest.checks import Check

__all__ = ["CHECKS"]

_CHECKS = "lightning_accel.graphcore._selftest.checks"

CHECKS = (
    Check("ipu.fit", "ipu", f"{_CHECKS}:fit", "one IPU trains a classifier to a real accuracy"),
    Check(
        "ipu.device_iterations", "ipu", f"{_CHECKS}:device_iterations", "device_iterations=4: 4 batches per host call"
    ),
    Check("ipu.replication", "ipu", f"{_CHECKS}:replication", "two data-parallel replicas train one model"),
    Check("ipu.pipeline", "ipu", f"{_CHECKS}:pipeline", "a model split into two pipeline stages on two IPUs trains"),
    Check("ipu.checkpoint", "ipu", f"{_CHECKS}:checkpoint", "a checkpoint saves and training resumes from it"),
)
