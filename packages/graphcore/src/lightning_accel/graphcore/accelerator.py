"""``IPUAccelerator``: the ``"ipu"`` accelerator (device counts of 1 or a power of two)."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.accelerators import Accelerator
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from . import sdk
from ._replication import AutoDeviceCount, AutoDevices
from .availability import availability

__all__ = ["IPUAccelerator"]

_MAX_IPUS = 64


def _accepted_counts(available: int) -> str:
    counts = []
    size = 1
    while size <= min(available, _MAX_IPUS):
        counts.append(str(size))
        size *= 2
    return ", ".join(counts) or "none (no IPU is available)"


class IPUAccelerator(Accelerator):
    """Graphcore IPUs through poptorch (or its emulator when ``LIGHTNING_ACCEL_EMULATE=ipu``).

    ``devices=N`` asks for ``N`` data-parallel replicas; ``N`` must be 1 or a power of two. A model split over
    ``k`` IPUs with ``poptorch.BeginBlock``/``Block`` needs ``k x N`` IPUs.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.graphcore import IPUAccelerator, IPUStrategy
        >>> trainer = Trainer(accelerator=IPUAccelerator(), strategy=IPUStrategy(), devices=8)  # doctest: +SKIP
    """

    @override
    def setup_device(self, device: torch.device) -> None:
        # poptorch reserves IPUs when a model is compiled; the host side needs no device setup.
        return None

    @override
    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """What the IPU system reports: how many IPUs this process can reserve."""
        return {"ipus_available": sdk.available_ipus()}

    @override
    def teardown(self) -> None:
        return None

    @staticmethod
    @override
    def parse_devices(devices: int | str | list[int] | tuple[int, ...]) -> int:
        """Turn ``devices`` into a number of IPUs (replicas).

        Raises:
            ConfigurationError: For a list of ids, a count that is not 1 or a power of two, or more IPUs than are
                available.
        """
        if isinstance(devices, (list, tuple)):
            raise ConfigurationError(
                f"Trainer(devices={devices!r}) is not accepted with accelerator='ipu': IPUs are selected by count, not "
                "by id. Pass an int such as devices=8."
            )
        count: Any = devices
        if isinstance(devices, str):
            text = devices.strip()
            if text == "auto":
                return IPUAccelerator.auto_device_count()
            try:
                count = int(text)
            except ValueError:
                count = devices
        if isinstance(count, bool) or not isinstance(count, int):
            raise ConfigurationError(
                f"Trainer(devices={devices!r}) is not accepted with accelerator='ipu'. Accepted: 'auto', -1 (all) or "
                "a number of IPUs that is 1 or a power of two (2, 4, 8, ...)."
            )
        available = sdk.available_ipus()
        if count == -1:
            # devices=-1 asks for every IPU: an explicit count, unlike "auto".
            return int(IPUAccelerator.auto_device_count())
        if count < 1 or count & (count - 1):
            raise ConfigurationError(
                f"Trainer(devices={count}) is not accepted with accelerator='ipu': IPUs are reserved in powers of two. "
                f"Accepted on this system: {_accepted_counts(available)}. Pick one of those, e.g. devices="
                f"{1 << (max(count, 1).bit_length() - 1)}."
            )
        if count > available:
            raise ConfigurationError(
                f"Trainer(devices={count}) asks for {count} IPUs but {available} are available. Accepted: "
                f"{_accepted_counts(available)}. Under emulation, raise LIGHTNING_ACCEL_EMULATED_DEVICES to emulate "
                "more IPUs."
            )
        return count

    @staticmethod
    @override
    def get_parallel_devices(devices: int) -> list[torch.device]:
        """One ``ipu`` device per replica (the strategy computes on the host device that feeds poptorch).

        For the count Lightning chose itself (``devices`` not given) the list is marked, so that the strategy can
        take the replication factor of the user's ``poptorch.Options`` instead.
        """
        found = [torch.device("ipu", index) for index in range(devices)]
        return AutoDevices(found) if isinstance(devices, AutoDeviceCount) else found

    @staticmethod
    @override
    def auto_device_count() -> int:
        """The largest power of two of IPUs this process can reserve (0 when IPUs are unavailable).

        Lightning calls it for ``devices="auto"``; the count is marked as chosen automatically (see
        :func:`get_parallel_devices`).
        """
        if not IPUAccelerator.is_available():
            return AutoDeviceCount(0)
        available = min(sdk.available_ipus(), _MAX_IPUS)
        return AutoDeviceCount(1 << (available.bit_length() - 1) if available else 0)

    @staticmethod
    @override
    def is_available() -> bool:
        """Whether IPUs (real or emulated) can be used."""
        return availability().usable

    @staticmethod
    @override
    def name() -> str:
        """The accelerator's registered name."""
        return "ipu"

    @classmethod
    @override
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        """Register as ``"ipu"``."""
        accelerator_registry.register(
            "ipu", cls, description="Graphcore IPU through poptorch (devices: 1 or a power of two)", override=True
        )
