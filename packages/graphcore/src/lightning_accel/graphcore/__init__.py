"""lightning-accel-graphcore: PyTorch Lightning on Graphcore IPUs, with a poptorch emulator for every machine.

Importing this package is cheap: it imports neither torch, Lightning nor poptorch (the core loads the
``lightning_accel.plugins`` entry point, ``lightning_accel.graphcore.plugin:PLUGIN``, while Lightning itself is
importing). The public classes load on first access; poptorch (or its emulator, with ``LIGHTNING_ACCEL_EMULATE=ipu``)
loads through :mod:`lightning_accel.graphcore.sdk` the first time an IPU is used.

Example:
    .. code-block:: python

        from lightning.pytorch import Trainer
        from lightning_accel.graphcore import IPUAccelerator, IPUStrategy

        trainer = Trainer(accelerator=IPUAccelerator(), strategy=IPUStrategy(device_iterations=32), devices=8)
"""

from typing import TYPE_CHECKING

from lightning_accel.core.lazy import lazy_exports

from .__about__ import __version__

if TYPE_CHECKING:
    from .accelerator import IPUAccelerator
    from .precision import SUPPORTED_PRECISION, IPUPrecision, IPUPrecisionPlugin
    from .preflight import ipu_preflight
    from .strategy import IPUPlugin, IPUStrategy

__all__ = [
    "SUPPORTED_PRECISION",
    "IPUAccelerator",
    "IPUPlugin",
    "IPUPrecision",
    "IPUPrecisionPlugin",
    "IPUStrategy",
    "__version__",
    "ipu_preflight",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "IPUAccelerator": ".accelerator",
        "IPUPlugin": ".strategy",
        "IPUStrategy": ".strategy",
        "IPUPrecision": ".precision",
        "IPUPrecisionPlugin": ".precision",
        "SUPPORTED_PRECISION": ".precision",
        "ipu_preflight": ".preflight",
    },
)
