"""Trainer strategies for HPUs."""

from .fsdp import HPUFSDPStrategy
from .parallel import HPUParallelStrategy
from .single import SingleHPUStrategy

__all__ = ["HPUFSDPStrategy", "HPUParallelStrategy", "SingleHPUStrategy"]
