"""The Fabric accelerator for Intel Gaudi (HPU)."""

from __future__ import annotations

from lightning.fabric.accelerators import Accelerator

from .._accelerator_common import HPUDevices

__all__ = ["HPUAccelerator"]


class HPUAccelerator(HPUDevices, Accelerator):
    """Fabric accelerator for Intel Gaudi devices (``Fabric(accelerator="hpu")``).

    Example:
        >>> from lightning.fabric import Fabric
        >>> from lightning_accel.habana.fabric import HPUAccelerator, SingleHPUStrategy
        >>> fabric = Fabric(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy())  # doctest: +SKIP

    Raises:
        DeviceUnavailableError: When neither the Habana SDK nor its emulator can be used.
    """
