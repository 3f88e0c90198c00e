"""The poptorch seam: the only module that imports poptorch.

:func:`poptorch` returns the real ``poptorch`` when it is installed, the package's emulator when
``LIGHTNING_ACCEL_EMULATE`` includes ``ipu``, and otherwise raises :class:`DeviceUnavailableError` saying how to
fix it. Nothing is imported or probed until it is first called. User code written against poptorch runs
unchanged when it gets the module from here:

Example:
    .. code-block:: python

        from lightning_accel.graphcore.sdk import poptorch

        class Net(LightningModule):
            def __init__(self):
                super().__init__()
                self.layer1 = poptorch().BeginBlock(torch.nn.Linear(5, 10), ipu_id=0)

    or, with the module-like accessor, ``from lightning_accel.graphcore import sdk`` then
    ``sdk.poptorch().BeginBlock(...)``.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import torch

from lightning_accel.core.emulation import announce_emulation, emulation_settings
from lightning_accel.core.errors import DeviceUnavailableError

__all__ = ["available_ipus", "host_device", "poptorch", "real_poptorch_installed"]

_MAX_IPUS = 64


def real_poptorch_installed() -> bool:
    """Whether the real ``poptorch`` (from the Poplar SDK) can be imported; does not import it."""
    return importlib.util.find_spec("poptorch") is not None


def poptorch() -> ModuleType:
    """The poptorch module to use: the real one, or the emulator when IPU emulation is on.

    Raises:
        DeviceUnavailableError: When poptorch is not installed and IPU emulation is off.
    """
    if real_poptorch_installed():
        return importlib.import_module("poptorch")
    if emulation_settings().emulates("ipu"):
        announce_emulation("ipu", "poptorch")
        from . import _emulator

        return _emulator
    raise DeviceUnavailableError(
        "Graphcore IPUs need poptorch, which is not installed: it ships with the Poplar SDK (see "
        "https://docs.graphcore.ai/, install the poptorch wheel from the SDK). To run on the software emulator "
        "instead, set LIGHTNING_ACCEL_EMULATE=ipu."
    )


def host_device() -> torch.device:
    """The device that holds the host copy of the model and the batches.

    poptorch takes host (CPU) tensors; the emulator computes on its backing device
    (``LIGHTNING_ACCEL_EMULATE_BACKEND``).
    """
    if real_poptorch_installed():
        return torch.device("cpu")
    backend = emulation_settings().backend
    return torch.device(backend, 0) if backend == "cuda" else torch.device(backend)


def available_ipus() -> int:
    """How many IPUs this process can reserve (at most 64), probing powers of two as poptorch allows."""
    module = poptorch()
    count = 0
    size = 1
    while size <= _MAX_IPUS and module.ipuHardwareIsAvailable(size):
        count = size
        size *= 2
    if real_poptorch_installed():
        return count
    # The emulated system's size is known exactly, power of two or not.
    return min(emulation_settings().devices, _MAX_IPUS)
