"""The poptorch seam: the only module that imports poptorch.

``poptorch`` here is the poptorch module to use. Which one answers that name is decided by the environment:

* ``LIGHTNING_ACCEL_EMULATE=ipu`` (or ``all``): the poptorch emulator (lightning-accel-poptorch-emulator, installed
  by the ``emulator`` extra, which declares the name ``poptorch`` in its entry points; lightning-accel-core's import
  aliases do the rest; this package never imports the emulator), even where poptorch is installed: an explicit
  request wins, so that emulated runs can be compared with hardware runs on one machine;
* otherwise, when poptorch (from the Poplar SDK) is installed: the real poptorch;
* otherwise: :class:`~lightning_accel.core.DeviceUnavailableError` saying how to install poptorch or turn the
  emulator on.

Nothing is imported or probed before the first use. User code written against poptorch runs unchanged on both,
with ``import poptorch`` or through the seam:

Example:
    >>> import os; os.environ["LIGHTNING_ACCEL_EMULATE"] = "ipu"
    >>> from lightning_accel.core.emulation import reset_emulation_settings; reset_emulation_settings()
    >>> from lightning_accel.graphcore.sdk import poptorch
    >>> import poptorch as by_name
    >>> by_name is poptorch
    True
    >>> poptorch.Options().deviceIterations(32).device_iterations
    32
"""

from __future__ import annotations

import importlib
import importlib.machinery
from types import ModuleType
from typing import TYPE_CHECKING, Any

from lightning_accel.core.emulation import (
    EMULATE_VAR,
    announce_emulation,
    emulation_settings,
    emulator_installed,
    follow_emulated_sdk_names,
)
from lightning_accel.core.errors import DeviceUnavailableError

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEVICE_TYPE",
    "SDK_PACKAGE",
    "available_ipus",
    "host_device",
    "is_emulated",
    "poptorch_module",
    "real_poptorch_installed",
]

DEVICE_TYPE = "ipu"
SDK_PACKAGE = "poptorch"
EMULATOR_DISTRIBUTION = "lightning-accel-poptorch-emulator"
EMULATOR_MISSING = (
    f"{EMULATE_VAR} asks for the poptorch emulator, but it is not installed ({EMULATOR_DISTRIBUTION}, its own "
    "distribution). Install it with `pip install 'lightning-accel-graphcore[emulator]'`, or on an IPU machine unset "
    f"{EMULATE_VAR} (or set it to 0) to use the real poptorch."
)
_MAX_IPUS = 64
# What the last poptorch releases (3.3, 3.4) need; see docs/graphcore/ipu.md, "IPU stack".
_STACK_HINT = (
    "poptorch 3.3 and 3.4 need torch==2.0.1 exactly (they check it when imported) and Lightning 2.3.3 at most: "
    "install lightning-accel-graphcore with `pip install torch==2.0.1 lightning==2.3.3` next to the poptorch wheel "
    "of your Poplar SDK, and enable the SDK (`source <sdk>/enable`)"
)


def is_emulated() -> bool:
    """Whether the seam hands out the emulator (``LIGHTNING_ACCEL_EMULATE`` includes ``ipu``)."""
    return emulation_settings().emulates(DEVICE_TYPE)


def real_poptorch_installed() -> bool:
    """Whether the real ``poptorch`` (from the Poplar SDK) is on the path; does not import it.

    The search skips the emulator's import alias, so it answers the same with emulation on or off.
    """
    return importlib.machinery.PathFinder.find_spec(SDK_PACKAGE) is not None


def poptorch_module() -> ModuleType:
    """The poptorch module to use: the emulator when IPU emulation is on, else the installed poptorch.

    Raises:
        DeviceUnavailableError: When emulation is on and the emulator is not installed, or when emulation is off and
            poptorch is missing or cannot be imported (for example next to another torch than the one it was built
            for).
    """
    follow_emulated_sdk_names()
    if is_emulated():
        if not emulator_installed(SDK_PACKAGE):
            raise DeviceUnavailableError(EMULATOR_MISSING)
        announce_emulation(DEVICE_TYPE, SDK_PACKAGE)
        return importlib.import_module(SDK_PACKAGE)
    if not real_poptorch_installed():
        raise DeviceUnavailableError(
            "Graphcore IPUs need poptorch, which is not installed: it ships with the Poplar SDK (see "
            "https://docs.graphcore.ai/, install the poptorch wheel from the SDK). To run on the software emulator "
            f"instead, set {EMULATE_VAR}=ipu."
        )
    try:
        return importlib.import_module(SDK_PACKAGE)
    except Exception as exc:
        # poptorch asserts its torch version when imported (python/__init__.py, poptorch 3.4) and fails to load
        # its C++ core when the SDK is not enabled; a C extension can raise anything else while it loads (OSError).
        raise DeviceUnavailableError(
            f"poptorch is installed but cannot be imported: {type(exc).__name__}: {exc}. {_STACK_HINT}. To run on the "
            f"software emulator instead, set {EMULATE_VAR}=ipu."
        ) from exc


def host_device() -> torch.device:
    """The device that holds the host copy of the model and the batches.

    poptorch takes host (CPU) tensors; the emulator computes on its backing device
    (``LIGHTNING_ACCEL_EMULATE_BACKEND``).
    """
    import torch

    if not is_emulated():
        return torch.device("cpu")
    backend = emulation_settings().backend
    return torch.device(backend, 0) if backend == "cuda" else torch.device(backend)


def available_ipus() -> int:
    """How many IPUs this process can reserve (at most 64), probing powers of two as poptorch allows."""
    module = poptorch_module()
    if is_emulated():
        # The emulated system's size is known exactly, power of two or not.
        return min(emulation_settings().devices, _MAX_IPUS)
    count = 0
    size = 1
    while size <= _MAX_IPUS and module.ipuHardwareIsAvailable(size):
        count = size
        size *= 2
    return count


def __getattr__(name: str) -> Any:
    # ``from lightning_accel.graphcore.sdk import poptorch`` resolves the module at that statement.
    if name == "poptorch":
        return poptorch_module()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
