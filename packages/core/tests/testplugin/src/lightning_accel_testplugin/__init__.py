"""A CPU-backed vendor plugin for lightning-accel-core's tests: accelerator ``testacc``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_accel.core.lazy import lazy_exports

if TYPE_CHECKING:
    from .accelerator import TestAccelerator
    from .strategies import TestDDPStrategy, TestSingleStrategy

__all__ = ["TestAccelerator", "TestDDPStrategy", "TestSingleStrategy"]
__getattr__, __dir__ = lazy_exports(
    __name__,
    {"TestAccelerator": ".accelerator", "TestDDPStrategy": ".strategies", "TestSingleStrategy": ".strategies"},
)
