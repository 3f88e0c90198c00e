"""Fabric counterparts."""

from __future__ import annotations

from typing import Any

import torch
from lightning.fabric.accelerators import CPUAccelerator
from lightning.fabric.strategies import DDPStrategy, SingleDeviceStrategy

from . import _devices


class TestFabricAccelerator(CPUAccelerator):
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


class TestFabricSingleStrategy(SingleDeviceStrategy):
    """One testacc device."""

    def __init__(self, device: Any = "cpu", **kwargs: Any) -> None:
        super().__init__(device="cpu", **kwargs)


class TestFabricDDPStrategy(DDPStrategy):
    """DDP over gloo."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("process_group_backend", "gloo")
        super().__init__(**kwargs)
