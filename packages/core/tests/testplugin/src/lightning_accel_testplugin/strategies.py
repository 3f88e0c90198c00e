"""Trainer strategies for testacc."""

from __future__ import annotations

from typing import Any, ClassVar

from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

from .precision import translate


class TestSingleStrategy(SingleDeviceStrategy):
    """One testacc device."""

    _registered_strategies: ClassVar[list[str]] = []

    def __init__(self, device: Any = "cpu", **kwargs: Any) -> None:
        super().__init__(device="cpu", **kwargs)

    @property
    def precision_plugin(self) -> Precision:
        return super().precision_plugin

    @precision_plugin.setter
    def precision_plugin(self, plugin: Any) -> None:
        self._precision_plugin = translate(plugin)


class TestDDPStrategy(DDPStrategy):
    """DDP over gloo on testacc devices."""

    _registered_strategies: ClassVar[list[str]] = []

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("process_group_backend", "gloo")
        super().__init__(**kwargs)
