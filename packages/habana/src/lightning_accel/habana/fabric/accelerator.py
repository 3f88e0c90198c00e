"""The Fabric accelerator for Intel Gaudi (HPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.accelerators import Accelerator
from typing_extensions import override

from .. import _devices, sdk

if TYPE_CHECKING:
    from lightning_accel.core.compat import AcceleratorRegistryType

__all__ = ["HPUAccelerator"]


class HPUAccelerator(Accelerator):
    """Fabric accelerator for Intel Gaudi devices (``Fabric(accelerator="hpu")``).

    Example:
        >>> from lightning.fabric import Fabric
        >>> from lightning_accel.habana.fabric import HPUAccelerator, SingleHPUStrategy
        >>> fabric = Fabric(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy())  # doctest: +SKIP

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
    def get_device_name() -> str:
        """The device name the SDK reports (``"GAUDI2 (emulated)"`` on the emulator)."""
        return _devices.device_name()

    @classmethod
    @override
    def name(cls) -> str:
        """``"hpu"``."""
        return "hpu"

    @classmethod
    @override
    def register_accelerators(cls, accelerator_registry: AcceleratorRegistryType) -> None:
        """Register ``"hpu"`` (the core does this from the plugin spec)."""
        accelerator_registry.register(cls.name(), cls, description=cls.__name__, override=True)
