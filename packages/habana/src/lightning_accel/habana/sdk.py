"""The seam: the only module that imports the Habana SDK (``habana_frameworks``).

It imports the SDK's modules by their real names and hands them out. Which SDK answers those names is decided by the
environment, not here:

* ``LIGHTNING_ACCEL_EMULATE=hpu`` (or ``all``): ``habana_frameworks.torch...`` resolves to the emulator
  (lightning-accel-habana-emulator, installed by the ``emulator`` extra, which declares the SDK's name in its entry
  points; lightning-accel-core's import aliases do the rest; this package never imports the emulator), even where
  the SDK is installed: an explicit request wins, so that emulated runs can be compared with hardware runs on one
  machine;
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
import importlib.metadata
import importlib.util
import os
import shlex
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from lightning_accel.core.emulation import (
    EMULATE_VAR,
    announce_emulation,
    emulation_settings,
    emulator_installed,
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
    "fused_kernels_module",
    "fused_normalization_module",
    "fused_optimizers_module",
    "hccl_module",
    "hpu_module",
    "ht_module",
    "is_emulated",
    "is_sdk_installed",
    "profiler_activities",
    "require",
    "sdk_version",
    "to_device",
    "transformer_engine_module",
]

DEVICE_TYPE = "hpu"
SDK_PACKAGE = "habana_frameworks"
SDK_DISTRIBUTION = "habana-torch-plugin"
DISTRIBUTED_BACKEND = "hccl"

_TORCH_PACKAGE = "habana_frameworks.torch"
EMULATOR_DISTRIBUTION = "lightning-accel-habana-emulator"
EMULATOR_MISSING = (
    f"{EMULATE_VAR} asks for the Habana SDK emulator, but it is not installed ({EMULATOR_DISTRIBUTION}, its own "
    "distribution). Install it with `pip install 'lightning-accel-habana[emulator]'`, or on a Gaudi machine unset "
    f"{EMULATE_VAR} (or set it to 0) to use the real SDK."
)

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
        if not emulator_installed(_TORCH_PACKAGE):
            raise DeviceUnavailableError(EMULATOR_MISSING)
        announce_emulation(DEVICE_TYPE, SDK_PACKAGE)
        return
    if is_sdk_installed():
        return
    raise DeviceUnavailableError(
        f"The Habana SDK ({SDK_DISTRIBUTION}, import name '{SDK_PACKAGE}') is missing, so HPUs cannot be used in this "
        f"process. Install the Gaudi software stack on a Gaudi machine, or set the environment variable "
        f"{EMULATE_VAR}=hpu to run on the software emulator (backed by the CPU; it needs a CPU-only build of "
        "torch)."
    )


def sdk_version() -> str | None:
    """The release of the SDK answering ``habana_frameworks`` (``"1.24.0"``; a wheel: ``"1.24.0.<build>"``), or None.

    The SDK's wheel writes ``habana_frameworks.torch.version`` when it is built (its ``hpu/__init__.py`` warns when
    that module is missing, as in a build from the repository); the version of the ``habana-torch-plugin``
    distribution stands in when the module cannot be read. ``None`` when neither can: no SDK, or an unusual build.
    """
    try:
        return str(_module("version").__version__)
    except (ImportError, AttributeError, DeviceUnavailableError):
        pass
    try:
        return importlib.metadata.version(SDK_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


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


def compile_backend_module() -> ModuleType:
    """``habana_frameworks.torch.dynamo.compile_backend``; importing it registers ``hpu_backend``."""
    return _module("dynamo.compile_backend")


def compiled_autograd_module() -> ModuleType:
    """``habana_frameworks.torch.dynamo.compile_backend.experimental``, where ``enable_compiled_autograd`` lives.

    Not ``compile_backend``: the SDK binds the function there only when ``PT_HPU_ENABLE_COMPILED_AUTOGRAD`` is set
    (bridge 1.19.0 ``dynamo/compile_backend/__init__.py:23-26``), to call it at load.
    """
    return _module("dynamo.compile_backend.experimental")


def compile_backend_config() -> ModuleType:
    """``habana_frameworks.torch.dynamo.compile_backend.config``: the settings ``hpu_backend`` takes as ``options``."""
    return _module("dynamo.compile_backend.config")


def metrics_module() -> ModuleType:
    """``habana_frameworks.torch.hpu.metrics``: ``metric_global``, ``metric_localcontext``, ``metrics_dump``."""
    return _module("hpu.metrics")


def transformer_engine_module() -> ModuleType:
    """``habana_frameworks.torch.hpex.experimental.transformer_engine``: ``Linear``, ``fp8_autocast``, ``recipe``."""
    return _module("hpex.experimental.transformer_engine")


def fused_optimizers_module() -> ModuleType:
    """``habana_frameworks.torch.hpex.optimizers``: ``FusedAdamW``, ``FusedSGD``, ``FusedAdagrad``, ``FusedLamb``."""
    return _module("hpex.optimizers")


def fused_normalization_module() -> ModuleType:
    """``habana_frameworks.torch.hpex.normalization``: ``FusedClipNorm`` (gradient clipping by norm)."""
    return _module("hpex.normalization")


def fused_kernels_module() -> ModuleType:
    """``habana_frameworks.torch.hpex.kernels``: ``FusedSDPA`` (fused scaled-dot-product attention)."""
    return _module("hpex.kernels")


def autocast(dtype: torch.dtype) -> AbstractContextManager[Any]:
    """``torch.autocast(device_type="hpu", dtype=dtype)``: the SDK's per-operator mixed precision.

    The SDK decides which ATen operator runs in which dtype, from the operator lists it read when it loaded (its
    default lists, or the files named by ``PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST`` /
    ``PT_HPU_AUTOCAST_FP32_OPS_LIST``; see :func:`_export_autocast_lists`).

    Args:
        dtype: The lower dtype, ``torch.bfloat16`` or ``torch.float16`` (Gaudi2 and later).
    """
    import torch

    ht_module()  # the SDK registers its autocast kernels for "hpu" when it loads
    return torch.autocast(device_type=DEVICE_TYPE, dtype=dtype)


def _read_list_file(path: str | os.PathLike[str]) -> frozenset[str] | None:
    # The names the SDK reads from a list file (every line as it is; blank and "#" lines name no operator).
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as handle:
            lines = handle.read().split("\n")
    except OSError:
        return None
    return frozenset(line for line in lines if line and not line.startswith("#"))


def _export_autocast_lists(lower_file: str | os.PathLike[str] | None, fp32_file: str | os.PathLike[str] | None) -> None:
    """Hand operator list files to the SDK, which reads them once, when it loads.

    Before the SDK has loaded, the environment variables are set to the files (absolute paths). After, nothing can
    change the SDK's lists: the files must be the ones the variables named when it loaded (or list the same names).
    ``None`` leaves that list to the SDK (its default, or what the variable named at start).

    Raises:
        ConfigurationError: When the SDK has loaded with other lists, or a variable already names another list; the
            message gives the ``export`` lines to set before the process starts.
    """
    wanted = {
        variable: Path(file).resolve()
        for variable, file in zip(_AUTOCAST_LIST_VARS, (lower_file, fp32_file), strict=True)
        if file is not None
    }

    def same(variable: str, path: Path) -> bool:
        current = os.environ.get(variable)
        if not current:
            return False
        if Path(current).resolve() == path:
            return True
        names = _read_list_file(current)
        return names is not None and names == _read_list_file(path)

    differing = [variable for variable, path in wanted.items() if not same(variable, path)]
    if not differing:
        return
    loaded = _TORCH_PACKAGE in sys.modules
    if loaded or any(os.environ.get(variable) for variable in differing):
        exports = "\n".join(f"    export {variable}={shlex.quote(str(path))}" for variable, path in wanted.items())
        now = ", ".join(
            f"{variable}={os.environ[variable]}" if os.environ.get(variable) else f"{variable} unset"
            for variable in differing
        )
        reason = (
            "the Habana SDK has already loaded, and it reads its autocast operator lists once, when it loads (at "
            "`import torch` in eager mode, the default), from the files these variables named then"
            if loaded
            else "the environment already names other lists, which the SDK would read when it loads"
        )
        raise ConfigurationError(
            f"The operator lists given to the precision plugin ({', '.join(str(p) for p in wanted.values())}) cannot "
            f"reach the SDK: {reason} ({now}). Set the variables before the process starts:\n{exports}\n"
            "and pass the same files to the plugin (or leave its file arguments out)."
        )
    for variable, path in wanted.items():
        os.environ[variable] = str(path)


def disable_casts() -> AbstractContextManager[Any]:
    """``torch.autocast(device_type="hpu", enabled=False)``: no operation is cast inside (around optimizer steps)."""
    import torch

    require()
    return torch.autocast(device_type=DEVICE_TYPE, enabled=False)


def profiler_activities() -> list[ProfilerActivity]:
    """What ``torch.profiler`` records for HPU work: CPU and HPU (``ProfilerActivity.HPU``, torch 2.1 and later).

    The emulated SDK registers no HPU trace source, so its traces hold the CPU activity only.
    """
    from torch.profiler import ProfilerActivity

    require()
    activities = [ProfilerActivity.CPU]
    hpu_activity = getattr(ProfilerActivity, "HPU", None)
    if hpu_activity is not None:
        activities.append(hpu_activity)
    return activities


def distributed_backend() -> str:
    """The ``torch.distributed`` backend name for HPUs: ``"hccl"`` (registered by :func:`hccl_module`)."""
    return DISTRIBUTED_BACKEND


def device_type() -> str:
    """The ``torch.device`` type of HPU tensors: ``"hpu"`` (the emulated SDK registers the same device type)."""
    require()
    return DEVICE_TYPE


def device(index: int | None = None) -> torch.device:
    """The ``torch.device`` of the process's HPU: ``hpu``, without an index.

    Every process drives one HPU and sees it as ``hpu`` (the runtime picks the module from ``HLS_MODULE_ID``), so
    ``index`` names a module but does not change the device.
    """
    import torch

    require()
    ht_module()  # the SDK registers "hpu" with torch when it loads
    return torch.device(DEVICE_TYPE)


def to_device(value: torch.device | str | int) -> torch.device:
    """Map a device a user gave (``torch.device("hpu")``, ``"hpu:1"``, an index) to where tensors live.

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
    raise ConfigurationError(
        f"device={value!r} is not an HPU. Accepted: 'hpu', 'hpu:N', torch.device('hpu') or an index. "
        "Use accelerator='cpu' or 'cuda' to train on another device."
    )


def __getattr__(name: str) -> Any:
    relative = _LAZY_MODULES.get(name)
    if relative is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _module(relative)
