"""Device parsing, queries and root-device mapping shared by the Trainer and Fabric accelerators and strategies.

It imports no Lightning on purpose: the classes of both trees (and their ``pytorch_lightning`` twins) delegate to
it, so each piece of logic is written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = [
    "RootDevice",
    "check_and_set_device",
    "device_count",
    "device_name",
    "hpu_available",
    "is_lazy",
    "parallel_devices",
    "parallel_root_device",
    "parse_devices",
]

_ACCEPTED = (
    "Accepted: a positive int (e.g. devices=2), -1 for every visible HPU, the same as a string (e.g. '2'), or 'auto'. "
    "Lists of device indices are not supported: each process is given its HPU by the runtime, so pass a count."
)


def hpu_available() -> bool:
    """Whether HPUs can be used here (hardware with the SDK, or the emulator); never raises.

    A broken SDK counts as unavailable: it raises ``AssertionError`` at import when torch is not the build it was made
    for, ``OSError`` when a shared library is missing, and anything else a C extension can raise while loading.
    """
    global _unavailable_because
    try:
        sdk.require()
        if sdk.hpu_module().is_available():
            _unavailable_because = None
            return True
        _unavailable_because = "the Habana SDK reports no usable HPU (hpu.is_available() is False)"
    except Exception as exc:
        _unavailable_because = f"the Habana SDK could not be loaded: {type(exc).__name__}: {exc}"
    return False


_unavailable_because: str | None = None


def is_lazy() -> bool:
    """Whether the SDK runs in lazy mode (``PT_HPU_LAZY_MODE=1`` when it loaded); eager is the default since 1.21."""
    return bool(sdk.core_module().is_lazy())


def device_count() -> int:
    """How many HPUs this process can see (0 when unavailable)."""
    if not hpu_available():
        return 0
    return int(sdk.hpu_module().device_count())


def device_name() -> str:
    """The name the SDK reports for the HPU (e.g. ``"GAUDI2"``), or ``""`` when unavailable."""
    if not hpu_available():
        return ""
    return str(sdk.hpu_module().get_device_name())


def parse_devices(devices: Any) -> int:
    """Turn the ``devices`` argument into a number of HPUs.

    Raises:
        ConfigurationError: When ``devices`` has a type or value that is not accepted, or asks for more HPUs than
            are visible.
    """
    value = devices
    if isinstance(value, str):
        text = value.strip()
        if text == "auto":
            return device_count()
        try:
            value = int(text)
        except ValueError:
            raise ConfigurationError(f"devices={devices!r} is not accepted by HPUAccelerator. {_ACCEPTED}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"devices={devices!r} ({type(devices).__name__}) is not accepted by HPUAccelerator. {_ACCEPTED}"
        )
    available = device_count()
    if value == -1:
        return available
    if value < 1:
        raise ConfigurationError(f"devices={devices!r} is not accepted by HPUAccelerator. {_ACCEPTED}")
    if available == 0 and _unavailable_because is not None:
        # Not "0 are visible": say why none can be used (e.g. an SDK built for another torch raises at load).
        raise ConfigurationError(
            f"devices={devices!r} asks for {value} HPUs, but no HPU can be used in this process: "
            f"{_unavailable_because}. Fix the Gaudi software stack, or set LIGHTNING_ACCEL_EMULATE=hpu to use the "
            "emulator."
        )
    if value > available:
        raise ConfigurationError(
            f"devices={devices!r} asks for {value} HPUs, but only {available} are visible to this process. Accepted: "
            f"1 to {available}, -1 or 'auto' for all of them. Check HABANA_VISIBLE_MODULES, or with the emulator set "
            "LIGHTNING_ACCEL_EMULATED_DEVICES to a larger number."
        )
    return value


def parallel_devices(devices: Any) -> list[torch.device]:
    """The devices of ``devices`` HPUs (a count, or anything :func:`parse_devices` accepts)."""
    count = devices if isinstance(devices, int) and not isinstance(devices, bool) else parse_devices(devices)
    return [sdk.device(index) for index in range(count)]


def check_and_set_device(device: torch.device) -> None:
    """Check that ``device`` holds HPU tensors and make it the current HPU (the accelerators' ``setup_device``).

    Raises:
        ConfigurationError: When ``device`` is not an HPU.
    """
    expected = sdk.device_type()
    if device.type != expected:
        raise ConfigurationError(
            f"HPUAccelerator got device={device!r}, which is not an HPU. Accepted: torch.device({expected!r}). Use an "
            "HPU strategy (SingleHPUStrategy, HPUParallelStrategy), or accelerator='cpu' / 'cuda' for other devices."
        )
    if device.index is not None:
        sdk.hpu_module().set_device(device.index)


class RootDevice:
    """The device of a single-device strategy's HPU, from the device it was given (``"hpu"``, ``"hpu:N"``, an index).

    Strategies read their root device on every batch transfer, so the mapping is done once per given device (one
    instance per strategy).
    """

    __slots__ = ("_device", "_key")

    def __init__(self) -> None:
        self._key: torch.device | str | None = None
        self._device: torch.device | None = None

    def of(self, device: torch.device | str) -> torch.device:
        """The device ``device`` maps to.

        Raises:
            ConfigurationError: When ``device`` is not an HPU.
        """
        if self._key != device or self._device is None:
            self._device = sdk.to_device(device)
            self._key = device
        return self._device


def parallel_root_device(parallel_devices: Sequence[torch.device] | None, local_rank: int) -> torch.device:
    """The device of this process's HPU in a data-parallel strategy.

    ``parallel_devices[local_rank]``; an HPU without an index (``torch.device("hpu")``, as users write it) becomes
    the HPU of this local rank. Each process sees its own HPU as ``hpu``.

    Args:
        parallel_devices: The devices of this node, one per local rank (the strategy's ``parallel_devices``).
        local_rank: This process's rank on its node.

    Raises:
        ConfigurationError: When the device is not an HPU.
    """
    assert parallel_devices is not None
    given = parallel_devices[local_rank]
    if given.type == sdk.DEVICE_TYPE and given.index is None:
        given = torch.device(sdk.DEVICE_TYPE, local_rank)
    return sdk.to_device(given)
