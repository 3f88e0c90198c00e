"""Emulation of ``habana_frameworks.torch.utils.experimental``: what the device generation supports.

DeepSpeed's HPU accelerator asks ``_is_fp16_supported()`` before it offers float16. The emulated generation is the
one ``LIGHTNING_ACCEL_EMULATE_HPU_TYPE`` names (a Gaudi2 by default; see ``_generation``); first-generation Gaudi has
no float16.
"""

from __future__ import annotations

from enum import Enum

from ... import _not_emulated
from ..._generation import GENERATIONS as _GENERATIONS
from ..._generation import generation as _generation
from .detect_recompilation import const_shape_dataloader, data_dynamicity, detect_recompilation_auto_model

__all__ = [
    "_get_device_type",
    "_is_fp16_supported",
    "const_shape_dataloader",
    "data_dynamicity",
    "detect_recompilation_auto_model",
    "synDeviceType",
]


class synDeviceType(Enum):
    """The device generations the SDK knows (its ``synDeviceType``)."""

    synDeviceGaudi = 1
    synDeviceGaudi2 = 2
    synDeviceGaudi3 = 3


def _get_device_type() -> synDeviceType:
    """The generation of the emulated device (``LIGHTNING_ACCEL_EMULATE_HPU_TYPE``, read at SDK load)."""
    return synDeviceType(_GENERATIONS[_generation()][1])


def _is_fp16_supported() -> bool:
    """Whether float16 is supported: from Gaudi2 on."""
    return _get_device_type() != synDeviceType.synDeviceGaudi


_not_emulated.provide(globals(), "habana_frameworks.torch.utils.experimental")
