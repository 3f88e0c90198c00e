"""A software emulator of the Habana SDK (``habana_frameworks.torch``) for machines without Gaudi.

The subpackage mirrors the SDK's module names so that :mod:`lightning_accel.habana.sdk` can hand it out in place of
the real modules:

========================================  ==============================================
SDK module                                Emulator module
========================================  ==============================================
``habana_frameworks.torch``               ``lightning_accel.habana._emulator``
``habana_frameworks.torch.core``          ``lightning_accel.habana._emulator.core``
``habana_frameworks.torch.hpu``           ``lightning_accel.habana._emulator.hpu``
``habana_frameworks.torch.distributed``   ``lightning_accel.habana._emulator.distributed``
``...distributed.hccl``                   ``lightning_accel.habana._emulator.distributed.hccl``
``...utils.library_loader``               ``lightning_accel.habana._emulator.utils.library_loader``
========================================  ==============================================

Tensors live on the backing device chosen by ``LIGHTNING_ACCEL_EMULATE_BACKEND`` (``cpu`` or ``cuda``). Do not import
this package directly; go through the seam.
"""

from . import core, hpu

__all__ = ["core", "hpu"]
