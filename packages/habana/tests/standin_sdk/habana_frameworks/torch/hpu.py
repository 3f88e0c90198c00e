"""Stand-in for ``habana_frameworks.torch.hpu``: two Gaudi 3 cards; records the devices statistics are asked for."""

from typing import Any

STATS = {
    "Limit": 128 * 2**30,
    "InUse": 3 * 2**20,
    "MaxInUse": 5 * 2**20,
    "NumAllocs": 11,
    "NumFrees": 4,
    "ActiveAllocs": 7,
    "MaxAllocSize": 2**20,
    "TotalSystemAllocs": 2,
    "TotalSystemFrees": 0,
    "TotalActiveAllocs": 2,
}
stats_asked_for: list[Any] = []


def is_available() -> bool:
    return True


def device_count() -> int:
    return 2


def get_device_name() -> str:
    return "GAUDI3"


def memory_stats(device: Any = None) -> dict[str, int]:
    stats_asked_for.append(device)
    return dict(STATS)
