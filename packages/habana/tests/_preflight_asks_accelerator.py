"""A model module that asks torch for its accelerator when it is imported, as transformers does."""

from __future__ import annotations

import torch
from _preflight_models import Clean

torch.accelerator.current_accelerator()

__all__ = ["Clean"]
