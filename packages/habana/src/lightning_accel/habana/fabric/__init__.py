"""Fabric counterparts of the HPU accelerator and strategies.

Example:
    >>> from lightning.fabric import Fabric
    >>> from lightning_accel.habana.fabric import HPUAccelerator, SingleHPUStrategy
    >>> fabric = Fabric(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy())  # doctest: +SKIP
"""

from ..checkpoint_io import HPUCheckpointIO
from .accelerator import HPUAccelerator
from .fast_ddp import HPUFastDDPStrategy
from .fsdp import HPUFSDPStrategy
from .fsdp_precision import HPUFSDPPrecision
from .model_parallel import HPUModelParallelStrategy
from .precision import HPUPrecision
from .strategies import HPUParallelStrategy, SingleHPUStrategy

__all__ = [
    "HPUAccelerator",
    "HPUCheckpointIO",
    "HPUFSDPPrecision",
    "HPUFSDPStrategy",
    "HPUFastDDPStrategy",
    "HPUModelParallelStrategy",
    "HPUParallelStrategy",
    "HPUPrecision",
    "SingleHPUStrategy",
]
