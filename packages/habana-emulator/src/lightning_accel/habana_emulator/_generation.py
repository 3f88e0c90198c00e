"""Which Gaudi generation the emulator is: the one source of the device name and ``synDeviceType``.

``LIGHTNING_ACCEL_EMULATE_HPU_TYPE`` (``gaudi``, ``gaudi2`` or ``gaudi3``, any case; default ``gaudi2``) is read once,
when the emulated SDK loads, as the real SDK learns the generation from the card when it initialises.
``hpu.get_device_name()`` reports it as the SDK does (``"GAUDI"``, ``"GAUDI2"``, ``"GAUDI3"``, followed by
``" (emulated)"``), and ``utils.experimental._get_device_type()`` as the SDK's ``synDeviceType``. What depends on it:
float16 (``_is_fp16_supported()``) and fp8 (``transformer_engine.fp8.is_fp8_available()``) exist from Gaudi2 on.
"""

from __future__ import annotations

import os

from lightning_accel.core.errors import ConfigurationError

__all__ = ["GENERATION_VAR", "GENERATIONS", "device_name", "generation", "load_generation"]

GENERATION_VAR = "LIGHTNING_ACCEL_EMULATE_HPU_TYPE"
# Variable value -> (the SDK's device name, its synDeviceType value).
GENERATIONS: dict[str, tuple[str, int]] = {"gaudi": ("GAUDI", 1), "gaudi2": ("GAUDI2", 2), "gaudi3": ("GAUDI3", 3)}
_DEFAULT = "gaudi2"

_loaded: str | None = None


def load_generation() -> str:
    """Read ``LIGHTNING_ACCEL_EMULATE_HPU_TYPE`` (at SDK load) and keep it for the life of the process.

    Raises:
        ConfigurationError: For a value that names no Gaudi generation.
    """
    global _loaded
    raw = os.environ.get(GENERATION_VAR, "")
    value = raw.strip().lower() or _DEFAULT
    if value not in GENERATIONS:
        raise ConfigurationError(
            f"{GENERATION_VAR}={raw!r} names no Gaudi generation. Accepted: {', '.join(map(repr, GENERATIONS))} "
            f"(any case); unset it to emulate a {GENERATIONS[_DEFAULT][0]}."
        )
    _loaded = value
    return value


def generation() -> str:
    """The emulated generation (``"gaudi"``, ``"gaudi2"`` or ``"gaudi3"``), read at SDK load."""
    return _loaded if _loaded is not None else load_generation()


def device_name() -> str:
    """The device name the SDK reports for this generation, marked as emulated (``"GAUDI2 (emulated)"``)."""
    return f"{GENERATIONS[generation()][0]} (emulated)"
