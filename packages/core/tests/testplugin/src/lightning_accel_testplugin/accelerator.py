"""The Trainer accelerator."""

from typing import Any

import torch
from lightning.pytorch.accelerators import CPUAccelerator


class TestAccelerator(CPUAccelerator):
    """A CPU accelerator registered under another name."""

    @staticmethod
    def parse_devices(devices: Any) -> int:
        return int(devices)

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device("cpu")] * int(devices)

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @classmethod
    def name(cls) -> str:
        return "testacc"
