"""Emulation of ``transformer_engine.constants`` (gaudi-pytorch-bridge 1.18.0, ``constants.py``).

``GemmParallelModes`` are the ``parallel_mode`` values of ``Linear`` (``"row"``, ``"column"``, ``None``);
``dist_group_type`` is the type of the process groups amaxes are reduced over.
"""

from __future__ import annotations

import torch.distributed

__all__ = ["GemmParallelModes", "dist_group_type"]

GemmParallelModes = ("row", "column", None)

dist_group_type = torch.distributed.ProcessGroup
