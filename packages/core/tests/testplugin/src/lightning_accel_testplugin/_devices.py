"""Device parsing and statistics shared by the Trainer and Fabric accelerators."""

from __future__ import annotations

from typing import Any

from lightning_accel.core.errors import ConfigurationError

_ACCEPTED = "Accepted: a positive int or a numeric string (e.g. devices=2)."


def parse_devices(devices: Any) -> int:
    """The number of testacc devices asked for.

    Raises:
        ConfigurationError: For anything but a positive count.
    """
    count = devices
    if isinstance(devices, str):
        try:
            count = int(devices.strip())
        except ValueError:
            raise ConfigurationError(f"devices={devices!r} is not accepted by testacc. {_ACCEPTED}") from None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigurationError(f"devices={devices!r} is not accepted by testacc. {_ACCEPTED}")
    return count


def memory_stats() -> dict[str, float]:
    """The bytes this process holds in memory (testacc's tensors live in host memory)."""
    import psutil

    return {"rss_bytes": float(psutil.Process().memory_info().rss)}
