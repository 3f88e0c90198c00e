"""The seam: the only module that imports the Habana SDK (``habana_frameworks``).

It imports the SDK's modules by their real names and hands them out. Which SDK answers those names is decided by the
environment, not here:

* ``LIGHTNING_ACCEL_EMULATE=hpu`` (or ``all``): ``habana_frameworks.torch...`` resolves to the package's emulator
  (lightning-accel-core's import aliases, declared in this distribution's entry points), even where the SDK is
  installed: an explicit request wins, so that emulated runs can be compared with hardware runs on one machine;
* otherwise, when ``habana_frameworks`` is installed: the real SDK;
* otherwise: :class:`~lightning_accel.core.DeviceUnavailableError` saying how to install the SDK or turn the
  emulator on.

User code written against the SDK runs unchanged on both, through the real names or the lazy module attributes:

Example:
    >>> import os; os.environ["LIGHTNING_ACCEL_EMULATE"] = "hpu"
    >>> from lightning_accel.core.emulation import reset_emulation_settings; reset_emulation_settings()
    >>> from lightning_accel.habana.sdk import htcore, hpu
    >>> htcore.mark_step()
    >>> hpu.get_device_name()
    'GAUDI2 (emulated)'
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import tempfile
import warnings
from contextlib import AbstractContextManager
from types import ModuleType
from typing import TYPE_CHECKING, Any

from lightning_accel.core.emulation import (
    EMULATE_VAR,
    announce_emulation,
    emulation_settings,
    follow_emulated_sdk_names,
)
from lightning_accel.core.errors import ConfigurationError, DeviceUnavailableError

if TYPE_CHECKING:
    import torch
    from torch.profiler import ProfilerActivity

__all__ = [
    "DEVICE_TYPE",
    "DISTRIBUTED_BACKEND",
    "SDK_DISTRIBUTION",
    "SDK_PACKAGE",
    "autocast",
    "core_module",
    "device",
    "device_type",
    "disable_casts",
    "distributed_backend",
    "hccl_module",
    "hpu_module",
    "ht_module",
    "is_emulated",
    "is_sdk_installed",
    "profiler_activities",
    "require",
    "to_device",
]

DEVICE_TYPE = "hpu"
SDK_PACKAGE = "habana_frameworks"
SDK_DISTRIBUTION = "habana-torch-plugin"
DISTRIBUTED_BACKEND = "hccl"

_TORCH_PACKAGE = "habana_frameworks.torch"

# Lazy attributes: ``from lightning_accel.habana.sdk import htcore`` resolves the SDK at that statement.
_LAZY_MODULES = {"htcore": "core", "hpu": "hpu", "hccl": "distributed.hccl", "ht": ""}

# The SDK reads custom autocast operator lists from these files when it is imported (not later).
_AUTOCAST_LIST_VARS = ("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST", "PT_HPU_AUTOCAST_FP32_OPS_LIST")


def is_sdk_installed() -> bool:
    """Whether ``habana_frameworks`` can be imported (the SDK, or the emulator when it is asked for); not imported."""
    follow_emulated_sdk_names()
    return importlib.util.find_spec(SDK_PACKAGE) is not None


def is_emulated() -> bool:
    """Whether the seam hands out the emulator (``LIGHTNING_ACCEL_EMULATE`` includes ``hpu``)."""
    return emulation_settings().emulates(DEVICE_TYPE)


def require() -> None:
    """Check that the SDK or its emulator can be used.

    Raises:
        DeviceUnavailableError: When neither is available; the message says how to fix it.
    """
    if is_emulated():
        announce_emulation(DEVICE_TYPE, SDK_PACKAGE)
        return
    if is_sdk_installed():
        return
    raise DeviceUnavailableError(
        f"The Habana SDK ({SDK_DISTRIBUTION}, import name '{SDK_PACKAGE}') is missing, so HPUs cannot be used in this "
        f"process. Install the Gaudi software stack on a Gaudi machine, or set the environment variable "
        f"{EMULATE_VAR}=hpu to run on the software emulator (backed by CPU, or CUDA with "
        "LIGHTNING_ACCEL_EMULATE_BACKEND=cuda)."
    )


def _module(relative: str) -> ModuleType:
    require()
    follow_emulated_sdk_names()
    return importlib.import_module(f"{_TORCH_PACKAGE}.{relative}" if relative else _TORCH_PACKAGE)


def ht_module() -> ModuleType:
    """``habana_frameworks.torch`` (or the emulator's package), with ``.core`` and ``.hpu``."""
    return _module("")


def core_module() -> ModuleType:
    """``habana_frameworks.torch.core`` (``htcore``): ``mark_step()``, ``is_lazy()``."""
    return _module("core")


def hpu_module() -> ModuleType:
    """``habana_frameworks.torch.hpu``: device queries, RNG and memory statistics."""
    return _module("hpu")


def hccl_module() -> ModuleType:
    """``habana_frameworks.torch.distributed.hccl``; importing it registers the ``"hccl"`` backend."""
    return _module("distributed.hccl")


def autocast(
    dtype: torch.dtype,
    lower_ops: frozenset[str] | None = None,
    fp32_ops: frozenset[str] | None = None,
    opt_level: str = "O1",
    verbose: bool = False,
) -> AbstractContextManager[Any]:
    """A context manager that runs operations in mixed precision, operator by operator.

    On Gaudi it is ``torch.autocast(device_type="hpu", dtype=dtype)``; custom lists are handed to the SDK through
    ``PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST`` / ``PT_HPU_AUTOCAST_FP32_OPS_LIST``, which the SDK reads when it is
    first imported. On the emulator it is the emulator's per-operator casting with the same lists.

    Args:
        dtype: The lower dtype, ``torch.bfloat16`` or ``torch.float16``.
        lower_ops: Operators run in ``dtype``; the SDK's defaults when ``None``.
        fp32_ops: Operators run in float32; the SDK's defaults when ``None``.
        opt_level: ``"O1"`` (only listed operators are cast) or ``"O2"`` (all but ``fp32_ops`` in ``dtype``).
        verbose: Log each operator's cast decision.
    """
    require()
    if is_emulated():
        from ._emulator import casting

        policy = casting.CastPolicy(
            lower_dtype=dtype,
            lower_ops=casting.DEFAULT_LOWER_OPS if lower_ops is None else lower_ops,
            fp32_ops=casting.DEFAULT_FP32_OPS if fp32_ops is None else fp32_ops,
            opt_level=opt_level,
            verbose=verbose,
        )
        return casting.autocast(policy)
    import torch

    _export_autocast_lists(lower_ops, fp32_ops)
    return torch.autocast(device_type=DEVICE_TYPE, dtype=dtype)


def _export_autocast_lists(lower_ops: frozenset[str] | None, fp32_ops: frozenset[str] | None) -> None:
    for variable, ops in zip(_AUTOCAST_LIST_VARS, (lower_ops, fp32_ops), strict=False):
        if ops is None or os.environ.get(variable):
            continue
        if SDK_PACKAGE in sys.modules:
            warnings.warn(
                f"The Habana SDK was imported before the operator lists were set, so it keeps its default lists. "
                f"Create the precision plugin before any HPU code runs, or set {variable} yourself.",
                stacklevel=3,
            )
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
            handle.write("\n".join(sorted(ops)) + "\n")
        os.environ[variable] = handle.name


def disable_casts() -> AbstractContextManager[Any]:
    """A context manager inside which no operation is cast (around optimizer steps), even within :func:`autocast`."""
    require()
    if is_emulated():
        from ._emulator import casting

        return casting.disable_casts()
    import torch

    return torch.autocast(device_type=DEVICE_TYPE, enabled=False)


def profiler_activities() -> list[ProfilerActivity]:
    """What ``torch.profiler`` records for HPU work: CPU and HPU on Gaudi; CPU (and CUDA on a CUDA backing) emulated."""
    from torch.profiler import ProfilerActivity

    require()
    activities = [ProfilerActivity.CPU]
    if is_emulated():
        if device_type() == "cuda":
            activities.append(ProfilerActivity.CUDA)
        return activities
    hpu_activity = getattr(ProfilerActivity, "HPU", None)
    if hpu_activity is not None:
        activities.append(hpu_activity)
    return activities


def distributed_backend() -> str:
    """The ``torch.distributed`` backend name for HPUs: ``"hccl"`` (registered by :func:`hccl_module`)."""
    return DISTRIBUTED_BACKEND


def device_type() -> str:
    """The ``torch.device`` type tensors of an HPU live on: ``"hpu"`` on hardware, ``"cpu"``/``"cuda"`` emulated."""
    require()
    if is_emulated():
        from ._emulator._backing import backing_type

        return backing_type()
    return DEVICE_TYPE


def device(index: int | None = None) -> torch.device:
    """The ``torch.device`` tensors of HPU ``index`` live on (the process's own HPU when ``None``).

    On hardware every process sees its HPU as ``hpu`` (the runtime picks the module from ``HLS_MODULE_ID``).
    """
    import torch

    require()
    if is_emulated():
        from ._emulator._backing import backing_device

        return backing_device(index)
    return torch.device(DEVICE_TYPE)


def to_device(value: torch.device | str | int) -> torch.device:
    """Map a device a user gave (``torch.device("hpu")``, ``"hpu:1"``, an index) to where tensors live.

    The backing device itself is accepted too, so that mapping twice is harmless.

    Raises:
        ConfigurationError: When ``value`` is neither an HPU device nor the device HPU tensors live on.
    """
    import torch

    if isinstance(value, int) and not isinstance(value, bool):
        return device(value)
    try:
        parsed = torch.device(value)
    except (RuntimeError, TypeError) as exc:
        raise ConfigurationError(
            f"device={value!r} is not a device. Accepted: 'hpu', 'hpu:N', torch.device('hpu') or an index."
        ) from exc
    if parsed.type == DEVICE_TYPE:
        return device(parsed.index)
    if parsed.type == device_type():
        return parsed
    raise ConfigurationError(
        f"device={value!r} is not an HPU. Accepted: 'hpu', 'hpu:N', torch.device('hpu') or an index"
        f"{'' if device_type() == DEVICE_TYPE else f' (or {device_type()!r}, which backs the emulated HPUs)'}. "
        "Use accelerator='cpu' or 'cuda' to train on another device."
    )


def __getattr__(name: str) -> Any:
    relative = _LAZY_MODULES.get(name)
    if relative is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _module(relative)
