"""The Trainer accelerator for Intel Gaudi (HPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.accelerators import Accelerator
from typing_extensions import override

from . import _devices, sdk

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_accel.core.compat import AcceleratorRegistryType

__all__ = ["HPUAccelerator"]


class HPUAccelerator(Accelerator):
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

    def __init__(self) -> None:
        sdk.require()
        super().__init__()

    @override
    def setup_device(self, device: torch.device) -> None:
        """Check that ``device`` holds HPU tensors and make it the current HPU.

        Raises:
            ConfigurationError: When ``device`` is not an HPU.
        """
        _devices.check_and_set_device(device)

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        """Make evaluation use ``torch.no_grad``: HPU graphs cannot run under ``torch.inference_mode``."""
        for loop in (trainer.validate_loop, trainer.test_loop, trainer.predict_loop):
            loop.inference_mode = False

    @override
    def teardown(self) -> None:
        """Nothing to release: the runtime frees the device with the process."""

    @staticmethod
    @override
    def parse_devices(devices: Any) -> int:
        """The number of HPUs asked for: an int, a numeric string, or ``"auto"``.

        Raises:
            ConfigurationError: For any other value, or more HPUs than are visible.
        """
        return _devices.parse_devices(devices)

    @staticmethod
    @override
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """One ``hpu`` device per HPU: each process sees its own HPU as ``hpu``."""
        return _devices.parallel_devices(devices)

    @staticmethod
    @override
    def auto_device_count() -> int:
        """How many HPUs are visible (0 without SDK and emulator)."""
        return _devices.device_count()

    @staticmethod
    @override
    def is_available() -> bool:
        """Whether the Habana SDK with devices, or its emulator, can be used. Never raises."""
        return _devices.hpu_available()

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

    @staticmethod
    def get_device_name() -> str:
        """The device name the SDK reports (e.g. ``"GAUDI2"``; ``"GAUDI2 (emulated)"`` on the emulator)."""
        return _devices.device_name()

    @override
    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """The SDK's ten memory statistics (``Limit``, ``InUse``, ... ``TotalActiveAllocs``) for DeviceStatsMonitor."""
        return dict(sdk.hpu_module().memory_stats(device))

    @classmethod
    @override
    def name(cls) -> str:
        """``"hpu"``."""
        return "hpu"

    @classmethod
    @override
    def register_accelerators(cls, accelerator_registry: AcceleratorRegistryType) -> None:
        """Register ``"hpu"`` (the core does this from the plugin spec; kept for Lightning's own convention)."""
        accelerator_registry.register(cls.name(), cls, description=cls.__name__, override=True)
