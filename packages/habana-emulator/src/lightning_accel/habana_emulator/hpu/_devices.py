"""Device queries of the emulated ``habana_frameworks.torch.hpu`` (the SDK's ``hpu/__init__.py``).

"A device is acquired" is modelled as on the SDK: ``init()`` and the queries that call the SDK's ``_lazy_init()``
(``get_device_name``, ``current_device``, ``synchronize``, the memory statistics; gaudi-pytorch-bridge 1.19.0
``hpu/__init__.py:54-91,121-154``, ``hpu/memory.py``) open the card, and so does the first tensor placed on it. On
Gaudi that acquisition picks the module named by ``HLS_MODULE_ID`` (or any free one, by type, when it is unset), so
it must not happen before the strategy sets that variable; :func:`is_initialized` tells whether it has.
"""

from __future__ import annotations

import os

import torch

from .._backing import emulated_device_count
from .._generation import device_name

__all__ = [
    "HABANA_VISIBLE_MODULES_VAR",
    "HLS_MODULE_ID_VAR",
    "current_device",
    "device_count",
    "get_device_name",
    "init",
    "is_available",
    "is_initialized",
    "module_id",
    "set_device",
    "synchronize",
    "visible_device_count",
]

HABANA_VISIBLE_MODULES_VAR = "HABANA_VISIBLE_MODULES"
HLS_MODULE_ID_VAR = "HLS_MODULE_ID"

_current = 0


def visible_device_count() -> int:
    """How many emulated modules this process may use: the ``HABANA_VISIBLE_MODULES`` list if set, else all.

    Raises:
        ValueError: When ``HABANA_VISIBLE_MODULES`` names a module the emulator does not have.
    """
    total = emulated_device_count()
    raw = os.environ.get(HABANA_VISIBLE_MODULES_VAR)
    if raw is None or not raw.strip():
        return total
    modules = [part.strip() for part in raw.split(",") if part.strip()]
    bad = [m for m in modules if not m.isdigit() or int(m) >= total]
    if bad:
        raise ValueError(
            f"{HABANA_VISIBLE_MODULES_VAR}={raw!r} names module(s) {', '.join(map(repr, bad))} that the emulator does "
            f"not have. Accepted: comma-separated module ids from 0 to {total - 1} (LIGHTNING_ACCEL_EMULATED_DEVICES="
            f"{total}); unset it to see every emulated module."
        )
    return len(modules)


def is_available() -> bool:
    """Always ``True``: the emulator is only handed out when emulation is switched on."""
    return True


_initialized = False
_initialized_from: str | None = None


def init() -> None:
    """Open this process's HPU (the SDK's ``_lazy_init``); does nothing once it is open."""
    _lazy_init("hpu.init()")


def _lazy_init(by: str = "a tensor placed on the HPU") -> None:
    """Open the HPU once (the SDK's ``_lazy_init``); torch calls it before it makes the first ``"hpu"`` tensor."""
    global _initialized, _initialized_from
    if not _initialized:
        _initialized, _initialized_from = True, by
        # As the SDK's _lazy_init (hpu/__init__.py:87-91): activation checkpointing's default device becomes "hpu".
        from torch.utils.checkpoint import DefaultDeviceType

        DefaultDeviceType.set_device_type("hpu")


def is_initialized() -> bool:
    """Whether a query that opens the HPU has run (the SDK's ``_initialized``, set by its ``_lazy_init``)."""
    return _initialized


def acquired_by() -> str | None:
    """Emulator only (not an SDK name): what opened the HPU first.

    A query such as ``"hpu.get_device_name()"``, or ``"a tensor placed on the HPU"`` (which opens the card on Gaudi
    without the Python flag of :func:`is_initialized`); ``None`` while nothing has.
    """
    if _initialized_from is not None:
        return _initialized_from
    from .. import _native

    placed = _native.is_installed() and _native.memory_stats()["num_allocs"] > 0
    return "a tensor placed on the HPU" if placed else None


def device_count() -> int:
    """The number of emulated HPUs visible to this process."""
    return visible_device_count()


def get_device_name(device: int | str | torch.device | None = None) -> str:
    """The emulated generation's name (``LIGHTNING_ACCEL_EMULATE_HPU_TYPE``), e.g. ``"GAUDI2 (emulated)"``."""
    _lazy_init("hpu.get_device_name()")
    if device is not None:
        _check_index(_index_of(device), "device")
    return device_name()


def current_device() -> int:
    """The index of this process's HPU among the devices it drives: always 0.

    A process drives one Gaudi module and torch knows it as ``hpu:0``, whichever module it is (the module is chosen
    by ``HABANA_VISIBLE_MODULES`` / ``HLS_MODULE_ID``, or :func:`set_device`). Libraries build device names from
    this (DeepSpeed's HPU accelerator: ``f"hpu:{current_device()}"``), so it must name the device the tensors are on.
    """
    _lazy_init("hpu.current_device()")
    return 0


def module_id() -> int:
    """Emulator only (not an SDK name): the emulated module this process drives (the last :func:`set_device`)."""
    return _current


def set_device(device: int | str | torch.device) -> None:
    """Select the module this process drives, by the SDK's rules (its tensors stay on ``hpu:0``).

    As the SDK's ``set_device`` (``habana_frameworks/torch/hpu/__init__.py``, gaudi-pytorch-bridge 1.19.0 and the 1.24
    period alike): a module already pinned by ``HLS_MODULE_ID`` wins over the index; otherwise the index names a
    module of ``HABANA_VISIBLE_MODULES`` (or, without it, of a machine with 8 or more HPUs) and ``HLS_MODULE_ID`` is
    set to it; with fewer than 8 HPUs and no ``HABANA_VISIBLE_MODULES``, only index 0 is accepted. torch's
    ``DeviceMesh`` calls ``set_device(local_rank)`` in every rank, which this lets through where the SDK does.

    Raises:
        ValueError: When the index is outside ``range(device_count())``.
        AssertionError: The SDK's: an index other than 0 with fewer than 8 HPUs and no ``HABANA_VISIBLE_MODULES``,
            or a pinned ``HLS_MODULE_ID`` that is none of the visible modules.

    Example:
        >>> import habana_frameworks.torch.hpu as hpu  # doctest: +SKIP
        >>> hpu.set_device(0)  # doctest: +SKIP
    """
    global _current
    index = _index_of(device)
    _check_index(index, "device")
    visible = [part.strip() for part in os.environ.get(HABANA_VISIBLE_MODULES_VAR, "").split(",") if part.strip()]
    available = visible or [str(module) for module in range(device_count())]
    pinned = os.environ.get(HLS_MODULE_ID_VAR, "").strip()
    if pinned:
        if pinned not in available:
            raise AssertionError(
                f"Requested module_id={available[index]} is different from current_module_id={pinned} which was "
                "previously set."
            )
        index = available.index(pinned)
    elif not visible and device_count() < 8:
        if index != 0:
            raise AssertionError(
                f"As {HABANA_VISIBLE_MODULES_VAR} is not provided, the only supported device idx is 0."
            )
    else:
        os.environ[HLS_MODULE_ID_VAR] = available[index]
    _current = index


def synchronize() -> None:
    """Wait for queued HPU work; the emulated device runs each kernel when it is issued, so none is queued."""
    _lazy_init("hpu.synchronize()")


def _index_of(device: int | str | torch.device) -> int:
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"device={device!r} is not an HPU device. Accepted: an index, 'hpu', 'hpu:N' or torch.device('hpu', N)."
        ) from exc
    if parsed.type != "hpu":
        raise ValueError(
            f"device={device!r} is not an HPU device. Accepted: an index, 'hpu', 'hpu:N' or torch.device('hpu', N)."
        )
    return parsed.index if parsed.index is not None else _current


def _check_index(index: int, argument: str) -> None:
    count = device_count()
    if not 0 <= index < count:
        raise ValueError(
            f"{argument}={index} is out of range: {count} HPU(s) are visible, so accepted indices are 0 to "
            f"{count - 1}. Set LIGHTNING_ACCEL_EMULATED_DEVICES to emulate more devices."
        )
