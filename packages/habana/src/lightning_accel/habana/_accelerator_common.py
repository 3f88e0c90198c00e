"""The device part of the HPU accelerator, written once for the Trainer's and Fabric's ``HPUAccelerator``."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch
from lightning_utilities.core.rank_zero import rank_zero_warn

from . import _devices, sdk, versions
from ._autograd_exit import finish_autograd_at_exit

if TYPE_CHECKING:
    from lightning_accel.core.compat import AcceleratorRegistryType

__all__ = ["HPUDevices"]


@functools.lru_cache(maxsize=1)
def _warn_about_torch_once() -> None:
    # Once per process: every Trainer and Fabric of a run sets its device up. One warning covers the torch check and
    # the validated-stack check (versions.startup_warning), so a stack off in several ways is told once.
    message = versions.startup_warning()
    if message is not None:
        rank_zero_warn(message)


class HPUDevices:
    """Mixin for an accelerator of either Lightning tree: Gaudi's devices, counted, parsed and set up through the SDK.

    Put it before the tree's ``Accelerator``; its methods are that class's abstract ones.

    Example:
        >>> from lightning.fabric.accelerators import Accelerator
        >>> from lightning_accel.habana._accelerator_common import HPUDevices
        >>> class MyHPUAccelerator(HPUDevices, Accelerator):
        ...     pass

    Raises:
        DeviceUnavailableError: When made while neither the Habana SDK nor its emulator can be used.
    """

    def __init__(self) -> None:
        sdk.require()
        super().__init__()

    def setup_device(self, device: torch.device) -> None:
        """Check that ``device`` holds HPU tensors and make it the current HPU.

        Also registers, once per process, an exit handler that lets the HPU's autograd thread finish with the last
        backward before the interpreter ends (see ``_autograd_exit``).

        Raises:
            ConfigurationError: When ``device`` is not an HPU.
        """
        _devices.check_and_set_device(device)
        _warn_about_torch_once()
        finish_autograd_at_exit()

    def teardown(self) -> None:
        """Nothing to release: the runtime frees the device with the process."""

    @staticmethod
    def parse_devices(devices: Any) -> int:
        """The number of HPUs asked for: an int, a numeric string, or ``"auto"``.

        Raises:
            ConfigurationError: For any other value, or more HPUs than are visible.
        """
        return _devices.parse_devices(devices)

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """One ``hpu`` device per HPU: each process sees its own HPU as ``hpu``."""
        return _devices.parallel_devices(devices)

    @staticmethod
    def auto_device_count() -> int:
        """How many HPUs are visible (0 without SDK and emulator)."""
        return _devices.device_count()

    @staticmethod
    def is_available() -> bool:
        """Whether the Habana SDK with devices, or its emulator, can be used. Never raises."""
        return _devices.hpu_available()

    @staticmethod
    def get_device_name() -> str:
        """The device name the SDK reports (e.g. ``"GAUDI2"``; ``"GAUDI2 (emulated)"`` on the emulator)."""
        return _devices.device_name()

    @classmethod
    def name(cls) -> str:
        """``"hpu"``."""
        return "hpu"

    @classmethod
    def register_accelerators(cls, accelerator_registry: AcceleratorRegistryType) -> None:
        """Register ``"hpu"`` (the core does this from the plugin spec; kept for Lightning's own convention)."""
        accelerator_registry.register(cls.name(), cls, description=cls.__name__, override=True)
