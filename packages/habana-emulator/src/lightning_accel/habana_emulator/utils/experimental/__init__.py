"""Emulation of ``habana_frameworks.torch.utils.experimental``: the device generation and quantization attributes.

DeepSpeed's HPU accelerator asks ``_is_fp16_supported()`` before it offers float16; at bcc5172 the SDK answers
``True`` whatever the card (``utils/experimental/__init__.py:62-63``), as Gaudi 2 and 3, the generations it supports,
have float16. ``_get_device_type()`` is the generation ``LIGHTNING_ACCEL_EMULATE_HPU_TYPE`` names (a Gaudi2 by
default; see ``_generation``).

Intel Neural Compressor (3.8 and later) sets the graph attributes of its quantized models through
``_set_is_dynamic_quantization`` at every ``prepare``, and ``_set_scale_attributes``: on Gaudi they go to the graph
compiler (``_experimental_C``), which reads them when it compiles a graph with fp8 scales. The emulator keeps each
value and returns it from the matching getter, as the SDK does; no emulated kernel reads them (the emulator has no
graph compiler, and its fp8 operations compute with the scales they are given).
"""

from __future__ import annotations

import operator
from enum import Enum

from ... import _not_emulated
from ..._generation import GENERATIONS as _GENERATIONS
from ..._generation import generation as _generation
from .detect_recompilation import const_shape_dataloader, data_dynamicity, detect_recompilation_auto_model

__all__ = [
    "_get_device_type",
    "_get_is_dynamic_quantization",
    "_get_scale_attribute_hash_id",
    "_is_fp16_supported",
    "_set_is_dynamic_quantization",
    "_set_scale_attributes",
    "const_shape_dataloader",
    "data_dynamicity",
    "detect_recompilation_auto_model",
    "synDeviceType",
]


class synDeviceType(Enum):
    """The device generations the SDK knows (its ``synDeviceType``; the first generation is still a member)."""

    synDeviceGaudi = 1
    synDeviceGaudi2 = 2
    synDeviceGaudi3 = 3


def _get_device_type() -> synDeviceType:
    """The generation of the emulated device (``LIGHTNING_ACCEL_EMULATE_HPU_TYPE``, read at SDK load)."""
    return synDeviceType(_GENERATIONS[_generation()][1])


def _is_fp16_supported() -> bool:
    """Whether float16 is supported: always, as on the SDK of the 1.24 period."""
    return True


_is_dynamic_quantization = False
_scale_is_hw_aligned = False
_scale_hash_id = 0


def _set_scale_attributes(is_hw_aligned: bool, scale_hash_id: int) -> None:
    """Record the scale attributes of the graphs to come.

    ``is_hw_aligned``: whether every scale is hardware aligned; ``scale_hash_id``: the id of the scaling method that
    made them.

    Raises:
        TypeError: When ``scale_hash_id`` is not an int.
    """
    global _scale_is_hw_aligned, _scale_hash_id
    try:
        hash_id = operator.index(scale_hash_id)
    except TypeError:
        raise TypeError(
            f"scale_hash_id must be an int (the id of the scaling method), got {scale_hash_id!r} of type "
            f"{type(scale_hash_id).__name__}."
        ) from None
    _scale_is_hw_aligned = bool(is_hw_aligned)
    _scale_hash_id = hash_id


def _get_scale_attribute_hash_id() -> int:
    """The scaling method id last given to :func:`_set_scale_attributes` (0 until then)."""
    return _scale_hash_id


def _set_is_dynamic_quantization(is_dynamic_quantization: bool) -> None:
    """Record whether the graphs to come quantize dynamically (scales computed while running)."""
    global _is_dynamic_quantization
    _is_dynamic_quantization = bool(is_dynamic_quantization)


def _get_is_dynamic_quantization() -> bool:
    """What :func:`_set_is_dynamic_quantization` last recorded (``False`` until then)."""
    return _is_dynamic_quantization


_not_emulated.provide(globals(), "habana_frameworks.torch.utils.experimental")
