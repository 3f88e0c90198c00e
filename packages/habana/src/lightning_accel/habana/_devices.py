"""Device parsing and queries shared by the Trainer and Fabric accelerators."""

from __future__ import annotations

from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError, DeviceUnavailableError

from . import sdk

__all__ = ["device_count", "device_name", "hpu_available", "parallel_devices", "parse_devices"]

_ACCEPTED = (
    "Accepted: a positive int (e.g. devices=2), -1 for every visible HPU, the same as a string (e.g. '2'), or 'auto'. "
    "Lists of device indices are not supported: each process is given its HPU by the runtime, so pass a count."
)


def hpu_available() -> bool:
    """Whether HPUs can be used here (hardware with the SDK, or the emulator); never raises."""
    try:
        sdk.require()
        return bool(sdk.hpu_module().is_available())
    except (DeviceUnavailableError, ImportError):
        return False


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
