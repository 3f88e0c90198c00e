"""Emulation of ``habana_frameworks.torch.utils.experimental``: what the device generation supports.

DeepSpeed's HPU accelerator asks ``_is_fp16_supported()`` before it offers float16. The emulator reports a Gaudi2
(``hpu.get_device_name()``), which supports float16; first-generation Gaudi does not.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["_get_device_type", "_is_fp16_supported", "synDeviceType"]


class synDeviceType(Enum):
    """The device generations the SDK knows (its ``synDeviceType``)."""

    synDeviceGaudi = 1
    synDeviceGaudi2 = 2
    synDeviceGaudi3 = 3


def _get_device_type() -> synDeviceType:
    """The generation of the emulated device: Gaudi2."""
    return synDeviceType.synDeviceGaudi2


def _is_fp16_supported() -> bool:
    """Whether float16 is supported: from Gaudi2 on."""
    return _get_device_type() != synDeviceType.synDeviceGaudi
