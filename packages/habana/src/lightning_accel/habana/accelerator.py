"""The Trainer accelerator for Intel Gaudi (HPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.accelerators import Accelerator
from typing_extensions import override

from . import _devices, sdk
from ._accelerator_common import HPUDevices

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = ["HPUAccelerator"]


class HPUAccelerator(HPUDevices, Accelerator):
    """Accelerator for Intel Gaudi devices (``accelerator="hpu"``).

    Without Gaudi hardware, set ``LIGHTNING_ACCEL_EMULATE=hpu`` to run on the SDK emulator: the HPUs are then backed
    by the CPU (with a CPU-only build of torch).

    Evaluation runs under :func:`torch.no_grad`, because HPUs do not support :func:`torch.inference_mode`.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUAccelerator, SingleHPUStrategy
        >>> trainer = Trainer(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy(), devices=1)  # doctest: +SKIP

    Raises:
        DeviceUnavailableError: When neither the Habana SDK nor its emulator can be used.
    """

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        """Make evaluation use ``torch.no_grad``: HPU graphs cannot run under ``torch.inference_mode``."""
        for loop in (trainer.validate_loop, trainer.test_loop, trainer.predict_loop):
            loop.inference_mode = False

    @staticmethod
    def is_fp8_available() -> tuple[bool, str]:
        """``(True, "")`` where the HPU generation has fp8 (Gaudi2 on), else ``(False, reason)``; opens no device.

        Asked from ``utils.experimental._get_device_type()``, which counts devices by generation without acquiring one
        (the SDK's own ``FP8GlobalStateManager.is_fp8_available()`` asks ``get_device_name()``, which acquires one).
        """
        from ._fp8 import fp8_status

        return fp8_status()

    @staticmethod
    def is_lazy() -> bool:
        """Whether the SDK runs in lazy mode (``PT_HPU_LAZY_MODE=1``); eager is the SDK's default since 1.21."""
        return _devices.is_lazy()

    @override
    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """The SDK's ten memory statistics (``Limit``, ``InUse``, ... ``TotalActiveAllocs``) for DeviceStatsMonitor."""
        return dict(sdk.hpu_module().memory_stats(device))
