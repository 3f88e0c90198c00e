"""Device objects of the emulated ``"hpu"`` device and the backing device of each index.

Every ``"hpu"`` tensor carries an index, as torch needs one (the autograd engine queues work per device index).
``torch.device("hpu")`` without an index means ``hpu:0``: as on Gaudi, where a process drives one card and its
tensors report ``hpu:0`` whichever card it is, the card is chosen outside torch's index (``HABANA_VISIBLE_MODULES``,
``hpu.set_device``). Here the SDK module's current device plays that role for the CUDA backing: ``hpu:N`` is backed
by the GPU of emulated HPU ``module_id() + N`` (round-robin over the visible GPUs), so processes that call
``set_device(local_rank)`` are spread over the GPUs while their tensors all report ``hpu:0``. On the CPU backing
every index is the host.

The backing device of each index is cached, so that the operations of the device layer do not re-read the
emulation settings.
"""

from __future__ import annotations

import torch

from .._backing import backing_device
from ..hpu import _devices as _sdk_device

__all__ = ["DEFAULT_INDEX", "DEVICE_TYPE", "backing_of", "current_index", "hpu_device", "index_of"]

DEVICE_TYPE = "hpu"
DEFAULT_INDEX = 0

_hpu: dict[int, torch.device] = {}
_backing: dict[tuple[int, int], torch.device] = {}


def current_index() -> int:
    """The index ``torch.device("hpu")`` stands for: always ``0`` (see the module docstring)."""
    return DEFAULT_INDEX


def hpu_device(index: int) -> torch.device:
    """``torch.device("hpu", index)``, shared."""
    device = _hpu.get(index)
    if device is None:
        device = _hpu[index] = torch.device(DEVICE_TYPE, index)
    return device


def index_of(device: torch.device) -> int:
    """The index of an ``"hpu"`` device; ``0`` when it has none."""
    return DEFAULT_INDEX if device.index is None else device.index


def backing_of(index: int) -> torch.device:
    """The backing device of ``hpu:index`` in this process.

    Raises:
        ConfigurationError: When the CUDA backing is asked for but CUDA is not usable (see ``_backing``).
    """
    key = (index, _sdk_device.module_id())
    device = _backing.get(key)
    if device is None:
        device = _backing[key] = backing_device(key[0] + key[1])
    return device
