"""The pre-flight report for Gaudi: what a Lightning model will meet on the HPU, before renting one.

``lightning-accel preflight package.module:Class`` (or :func:`preflight` in Python, or :class:`PreflightCallback` in
any Trainer) runs a few training steps in lazy mode and in eager mode with ``torch.compile(backend="hpu_backend")``,
and reports CPU fallbacks, recompilations, graph breaks, host synchronisations, dtype hazards and float32 matrix
products under bf16 autocast, each with where it happens and how to fix it; and the device memory per rank that
DDP, FSDP, FSDP2 + TP and the ZeRO stages would need, against Gaudi2's and Gaudi3's.

Example:
    >>> from lightning_accel.habana.preflight import Report, render
    >>> print(render(Report("my.model:Net", 3), "markdown").splitlines()[0])
    # Pre-flight report for Gaudi: `my.model:Net`
"""

from __future__ import annotations

from typing import Any

from .memory import DEVICES, STRATEGIES, MemoryProfile, largest_batch, predict
from .report import FORMATS, Finding, Report, render
from .runner import DEFAULT_STEPS, main, preflight, run_preflight

__all__ = [
    "DEFAULT_STEPS",
    "DEVICES",
    "FORMATS",
    "STRATEGIES",
    "Finding",
    "MemoryProfile",
    "PreflightCallback",
    "Report",
    "largest_batch",
    "main",
    "predict",
    "preflight",
    "render",
    "run_preflight",
]


def __getattr__(name: str) -> Any:
    # The callback imports torch and Lightning: the CLI's parent process does not need them.
    if name == "PreflightCallback":
        from .collect import PreflightCallback

        return PreflightCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
