"""Which Gaudi generation the emulator is: the one source of the device name and ``synDeviceType``.

``LIGHTNING_ACCEL_EMULATE_HPU_TYPE`` (``gaudi2`` or ``gaudi3``, any case; default ``gaudi2``) is read once, when the
emulated SDK loads, as the real SDK learns the generation from the card when it initialises.
``hpu.get_device_name()`` reports it as the SDK does (``"GAUDI2"``, ``"GAUDI3"``, followed by ``" (emulated)"``), and
``utils.experimental._get_device_type()`` as the SDK's ``synDeviceType``.

First-generation Gaudi is refused: the emulated SDK is gaudi-pytorch-bridge bcc5172 (the 1.24 period), and Intel's
support matrix lists Gaudi 2 and Gaudi 3 only from release 1.22 on; that SDK answers ``_is_fp16_supported()`` with
``True`` unconditionally (``utils/experimental/__init__.py:62-63`` at bcc5172), so a first-generation card is not a
device it was written for.
"""

from __future__ import annotations

import os

from lightning_accel.core.errors import ConfigurationError

__all__ = ["GENERATION_VAR", "GENERATIONS", "device_name", "generation", "load_generation"]

GENERATION_VAR = "LIGHTNING_ACCEL_EMULATE_HPU_TYPE"
# Variable value -> (the SDK's device name, its synDeviceType value).
GENERATIONS: dict[str, tuple[str, int]] = {"gaudi2": ("GAUDI2", 2), "gaudi3": ("GAUDI3", 3)}
_DEFAULT = "gaudi2"
# Values that name a Gaudi generation the emulated SDK does not support, and why.
_UNSUPPORTED = {
    "gaudi": "first-generation Gaudi is not supported by the emulated SDK (gaudi-pytorch-bridge bcc5172, the 1.24 "
    "period): Intel's support matrix lists Gaudi 2 and Gaudi 3 only from release 1.22 on",
}

_loaded: str | None = None


def load_generation() -> str:
    """Read ``LIGHTNING_ACCEL_EMULATE_HPU_TYPE`` (at SDK load) and keep it for the life of the process.

    Raises:
        ConfigurationError: For a value that names no Gaudi generation, or one the emulated SDK does not support
            (``gaudi``, the first generation).
    """
    global _loaded
    raw = os.environ.get(GENERATION_VAR, "")
    value = raw.strip().lower() or _DEFAULT
    accepted = ", ".join(map(repr, GENERATIONS))
    if value in _UNSUPPORTED:
        raise ConfigurationError(
            f"{GENERATION_VAR}={raw!r} is not supported: {_UNSUPPORTED[value]}. Accepted: {accepted} (any case); "
            f"unset it to emulate a {GENERATIONS[_DEFAULT][0]}."
        )
    if value not in GENERATIONS:
        raise ConfigurationError(
            f"{GENERATION_VAR}={raw!r} names no Gaudi generation. Accepted: {accepted} (any case); unset it to "
            f"emulate a {GENERATIONS[_DEFAULT][0]}."
        )
    _loaded = value
    return value


def generation() -> str:
    """The emulated generation (``"gaudi2"`` or ``"gaudi3"``), read at SDK load."""
    return _loaded if _loaded is not None else load_generation()


def device_name() -> str:
    """The device name the SDK reports for this generation, marked as emulated (``"GAUDI2 (emulated)"``)."""
    return f"{GENERATIONS[generation()][0]} (emulated)"
