"""The Trainer accelerator."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.accelerators import CPUAccelerator

from . import _devices


class TestAccelerator(CPUAccelerator):
    """A CPU accelerator registered under another name."""

    @staticmethod
    def parse_devices(devices: Any) -> int:
        return _devices.parse_devices(devices)

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device("cpu")] * int(devices)

    @staticmethod
    def auto_device_count() -> int:
        return 1

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        return {**super().get_device_stats(device), **_devices.memory_stats()}

    @classmethod
    def name(cls) -> str:
        return "testacc"
