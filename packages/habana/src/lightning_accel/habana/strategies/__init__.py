"""Trainer strategies for HPUs."""

from .fsdp import HPUFSDPStrategy
from .model_parallel import HPUModelParallelStrategy
from .parallel import HPUParallelStrategy
from .single import SingleHPUStrategy

__all__ = ["HPUFSDPStrategy", "HPUModelParallelStrategy", "HPUParallelStrategy", "SingleHPUStrategy"]
