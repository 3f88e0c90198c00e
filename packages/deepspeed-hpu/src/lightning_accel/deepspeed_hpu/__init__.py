"""DeepSpeed on Intel Gaudi (HPU) for PyTorch Lightning: ``HPUDeepSpeedStrategy`` and its precision plugin.

Importing this package is cheap: it imports neither torch, Lightning nor DeepSpeed; the public classes load on first
access. The ``hpu_deepspeed*`` strategy names are registered into the Trainer and Fabric by lightning-accel's core;
Fabric's strategy is :class:`lightning_accel.deepspeed_hpu.fabric.HPUDeepSpeedStrategy`.

Example:
    >>> from lightning.pytorch import Trainer
    >>> trainer = Trainer(accelerator="hpu", devices=2, strategy="hpu_deepspeed_stage_3")  # doctest: +SKIP
    >>> from lightning_accel.deepspeed_hpu import HPUDeepSpeedPrecisionPlugin, HPUDeepSpeedStrategy
    >>> strategy = HPUDeepSpeedStrategy(stage=2, offload_optimizer=True)  # doctest: +SKIP
"""

from typing import TYPE_CHECKING

import lightning_accel.core  # noqa: F401  (importing the core registers every installed plugin into Lightning)
from lightning_accel.core.lazy import lazy_exports

from .__about__ import __version__

if TYPE_CHECKING:
    from .memory import ZeroMemory, zero_memory
    from .precision import HPUDeepSpeedPrecisionPlugin
    from .strategy import HPUDeepSpeedStrategy

__all__ = ["HPUDeepSpeedPrecisionPlugin", "HPUDeepSpeedStrategy", "ZeroMemory", "__version__", "zero_memory"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "HPUDeepSpeedPrecisionPlugin": ".precision",
        "HPUDeepSpeedStrategy": ".strategy",
        "ZeroMemory": ".memory",
        "zero_memory": ".memory",
    },
)
