"""Trainer strategies for HPUs."""

from .parallel import HPUParallelStrategy
from .single import SingleHPUStrategy

__all__ = ["HPUParallelStrategy", "SingleHPUStrategy"]
