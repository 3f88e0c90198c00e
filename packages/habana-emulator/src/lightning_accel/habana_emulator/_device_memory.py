"""How much device memory the emulated HPU has: the one source of the allocator's limit and of ``Limit``.

``LIGHTNING_ACCEL_EMULATE_HPU_MEMORY`` is read once, when the emulated SDK loads, as the SDK learns the card's memory
when it acquires the device. It takes a Gaudi generation (``gaudi2``: 96 GiB, ``gaudi3``: 128 GiB, any case) or a
size: bytes (``"1048576"``) or a number with a unit, ``KiB``/``MiB``/``GiB``/``TiB`` (powers of 1024) or
``KB``/``MB``/``GB``/``TB`` (powers of 1000), any case (``"24GiB"``, ``"512MiB"``, ``"1.5GiB"``). Unset, the device
has the memory of the generation it is (``LIGHTNING_ACCEL_EMULATE_HPU_TYPE``, a Gaudi2 by default), so
``hpu.memory_stats()["Limit"]`` and ``hpu.mem_get_info()`` answer as that card's would. An allocation that would
pass the size fails as on a full card (see ``emulated_hpu/csrc/runtime/Allocator.cpp``).

The card's whole memory is the limit; the real SDK's ``Limit`` is what its memory pool manages, somewhat less (the
runtime keeps a part: a Gaudi3's reads 135960424448 bytes, about 126.6 GiB, in the bridge's ``hpu/memory.py``).

Example:
    >>> parse_device_memory("512MiB")
    536870912
    >>> parse_device_memory("gaudi3") == 128 * 2**30
    True
"""

from __future__ import annotations

import os
import re
from fractions import Fraction

from lightning_accel.core.errors import ConfigurationError

__all__ = ["GENERATION_MEMORY", "MEMORY_VAR", "device_memory", "load_device_memory", "parse_device_memory"]

MEMORY_VAR = "LIGHTNING_ACCEL_EMULATE_HPU_MEMORY"
#: The HBM of each generation the emulated SDK runs on: 6 and 8 stacks of 16 GiB.
GENERATION_MEMORY: dict[str, int] = {"gaudi2": 96 * 2**30, "gaudi3": 128 * 2**30}
_UNITS: dict[str, int] = {
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_SIZE = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[a-z]*)")
_ACCEPTED = (
    "Accepted: 'gaudi2' (96 GiB), 'gaudi3' (128 GiB) (any case), or a size above 0: bytes ('1048576') or a number "
    "with a unit, KiB/MiB/GiB/TiB (powers of 1024) or KB/MB/GB/TB (powers of 1000), e.g. '24GiB', '512MiB'"
)

_loaded: int | None = None


def _refuse(raw: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"{MEMORY_VAR}={raw!r} {why}. {_ACCEPTED}; unset it to give the device the memory of the emulated "
        "generation (LIGHTNING_ACCEL_EMULATE_HPU_TYPE)."
    )


def parse_device_memory(raw: str) -> int:
    """The device memory in bytes that a value of ``LIGHTNING_ACCEL_EMULATE_HPU_MEMORY`` names.

    Raises:
        ConfigurationError: For a value that is neither a generation nor a size above 0 bytes, naming the variable,
            the value and what is accepted.
    """
    value = raw.strip().lower()
    if value in GENERATION_MEMORY:
        return GENERATION_MEMORY[value]
    match = _SIZE.fullmatch(value)
    if match is None or match["unit"] not in ("", *_UNITS):
        raise _refuse(raw, "is not a device memory size")
    number, unit = match["number"], match["unit"]
    if not unit and "." in number:
        raise _refuse(raw, "is not a whole number of bytes")
    size = int(Fraction(number) * _UNITS[unit or "b"])
    if size <= 0:
        raise _refuse(raw, "leaves the device no memory")
    return size


def load_device_memory(generation: str) -> int:
    """Read ``LIGHTNING_ACCEL_EMULATE_HPU_MEMORY`` (at SDK load) and keep it for the life of the process.

    Args:
        generation: The emulated generation (``"gaudi2"`` or ``"gaudi3"``), whose memory an unset variable gives.

    Raises:
        ConfigurationError: For a value :func:`parse_device_memory` refuses.
    """
    global _loaded
    raw = os.environ.get(MEMORY_VAR, "")
    _loaded = parse_device_memory(raw) if raw.strip() else GENERATION_MEMORY[generation]
    return _loaded


def device_memory() -> int:
    """The emulated device's memory in bytes, as read when the SDK loaded.

    Raises:
        RuntimeError: Before the emulated SDK has loaded.
    """
    if _loaded is None:
        raise RuntimeError(
            "The emulated HPU's memory size is read when the emulated SDK loads: import habana_frameworks.torch "
            "(with LIGHTNING_ACCEL_EMULATE=hpu) first."
        )
    return _loaded
