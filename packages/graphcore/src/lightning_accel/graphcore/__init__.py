"""lightning-accel-graphcore: PyTorch Lightning on Graphcore IPUs, with a poptorch emulator for every machine.

``import lightning_accel.graphcore`` imports Lightning but never poptorch; poptorch (or its emulator) is loaded on
first use through :mod:`lightning_accel.graphcore.sdk`.

Example:
    .. code-block:: python

        from lightning.pytorch import Trainer
        from lightning_accel.graphcore import IPUAccelerator, IPUStrategy

        trainer = Trainer(accelerator=IPUAccelerator(), strategy=IPUStrategy(device_iterations=32), devices=8)
"""

from .__about__ import __version__
from .accelerator import IPUAccelerator
from .precision import SUPPORTED_PRECISION, IPUPrecision, IPUPrecisionPlugin
from .strategy import IPUPlugin, IPUStrategy

__all__ = [
    "SUPPORTED_PRECISION",
    "IPUAccelerator",
    "IPUPlugin",
    "IPUPrecision",
    "IPUPrecisionPlugin",
    "IPUStrategy",
    "__version__",
]
