"""Intel Gaudi (HPU) support for PyTorch Lightning 2.6: accelerator, strategies, checkpoint I/O and the SDK seam.

Importing this package does not import the Habana SDK; it is loaded (or its emulator, with
``LIGHTNING_ACCEL_EMULATE=hpu``) the first time an HPU is used.

Example:
    >>> from lightning.pytorch import Trainer
    >>> from lightning_accel.habana import HPUAccelerator, SingleHPUStrategy
    >>> trainer = Trainer(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy(), devices=1)  # doctest: +SKIP
"""

import lightning_accel.core  # noqa: F401  (importing the core registers every installed plugin into Lightning)

from . import sdk
from .__about__ import __version__
from .accelerator import HPUAccelerator
from .checkpoint_io import HPUCheckpointIO
from .strategies import HPUParallelStrategy, SingleHPUStrategy

__all__ = [
    "HPUAccelerator",
    "HPUCheckpointIO",
    "HPUParallelStrategy",
    "SingleHPUStrategy",
    "__version__",
    "sdk",
]
