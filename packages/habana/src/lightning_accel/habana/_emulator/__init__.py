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
``...hpex.hmp``                           ``lightning_accel.habana._emulator.hpex.hmp``
``...dynamo.compile_backend``             ``lightning_accel.habana._emulator.dynamo``
========================================  ==============================================

As importing the SDK does, importing the emulator registers the ``torch.compile`` backends ``hpu_backend``,
``aot_hpu_training_backend`` and ``aot_hpu_inference_backend``.

Tensors live on the backing device chosen by ``LIGHTNING_ACCEL_EMULATE_BACKEND`` (``cpu`` or ``cuda``). Do not import
this package directly; go through the seam.
"""

from . import core, dynamo, hpex, hpu

dynamo.register_backends()

__all__ = ["core", "dynamo", "hpex", "hpu"]
