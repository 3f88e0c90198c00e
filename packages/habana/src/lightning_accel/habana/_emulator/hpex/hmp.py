"""Emulation of ``habana_frameworks.torch.hpex.hmp``, Habana Mixed Precision (SDKs before 1.13).

``hmp.convert`` turns per-operator casting on for the rest of the process, from two operator lists (files with one
operator name per line); ``hmp.disable_casts()`` switches it off inside a block, for the optimizer step.

Example:
    >>> from lightning_accel.habana.sdk import hmp  # doctest: +SKIP
    >>> hmp.convert(opt_level="O1", bf16_file_path="ops_bf16.txt", fp32_file_path="ops_fp32.txt")  # doctest: +SKIP
    >>> with hmp.disable_casts():  # doctest: +SKIP
    ...     optimizer.step()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .. import casting

__all__ = ["convert", "disable_casts"]


def _read(path: str) -> frozenset[str] | None:
    if not path:
        return None
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return frozenset(line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip())


def convert(
    opt_level: str = "O2",
    bf16_file_path: str = "",
    fp32_file_path: str = "",
    isVerbose: bool = False,
) -> None:
    """Cast operators for the rest of this thread, as HMP does.

    Args:
        opt_level: ``"O1"``: only listed operators are cast; ``"O2"``: every operator but the float32 list runs in
            bfloat16.
        bf16_file_path: File naming the bfloat16 operators, one per line (the built-in list when empty).
        fp32_file_path: File naming the float32 operators, one per line (the built-in list when empty).
        isVerbose: Log each operator's first cast decision.

    Raises:
        ValueError: For an ``opt_level`` other than ``"O1"`` or ``"O2"``.
    """
    if opt_level not in ("O1", "O2"):
        raise ValueError(f"opt_level={opt_level!r} is not supported by HMP. Accepted: 'O1' or 'O2'.")
    lower = _read(bf16_file_path)
    fp32 = _read(fp32_file_path)
    policy = casting.CastPolicy(
        lower_dtype=torch.bfloat16,
        lower_ops=casting.DEFAULT_LOWER_OPS if lower is None else lower,
        fp32_ops=casting.DEFAULT_FP32_OPS if fp32 is None else fp32,
        opt_level=opt_level,
        verbose=isVerbose,
    )
    casting.enable_globally(policy)


def disable_casts() -> Any:
    """A context manager inside which no operator is cast (HMP's ``disable_casts``)."""
    return casting.disable_casts()
