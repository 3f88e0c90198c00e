"""What torch asks of a PrivateUse1 backend written in Python: the device module, the hooks and the device guard.

- The **device module** becomes ``torch.hpu`` (``torch._register_device_module``). torch calls its
  ``is_available``, ``device_count``, ``current_device``, ``is_initialized``, ``_is_in_bad_fork``,
  ``manual_seed_all`` (from ``torch.manual_seed``), ``get_rng_state``/``set_rng_state`` (``torch.random.fork_rng``)
  and ``get_amp_supported_dtype`` (autocast). On Gaudi ``torch.hpu`` *is* ``habana_frameworks.torch.hpu`` (the
  SDK's ``core`` registers it); :class:`DeviceModule` answers those calls and hands every other attribute to the
  emulated SDK module (``_emulator.hpu``), so ``torch.hpu.memory_stats()`` works as on Gaudi. The seam may pass
  the SDK module itself to :func:`~.install` instead, once it has the two private names torch needs.
- The **hooks** (``PrivateUse1HooksInterface``) tell torch the backend is built and available.
- The **device guard** is torch's Python guard for PrivateUse1. Its C++ side (``torch/csrc/acc/Module.cpp``) answers
  every call except ``type_`` itself: it always reports device index 0 as current, one device, and no streams or
  events. The emulated device's notion of the current HPU is therefore kept by the SDK module (``set_device``), and
  the autograd engine, which sizes its device threads by the guard's device count, serves ``hpu:0`` only (see the
  package docstring).
"""

from __future__ import annotations

import types
from typing import Any

import torch

from .. import hpu as _sdk_hpu

__all__ = ["DeviceGuard", "DeviceModule", "Hooks", "REQUIRED_MODULE_ATTRIBUTES"]

REQUIRED_MODULE_ATTRIBUTES = (
    "is_available",
    "is_initialized",
    "device_count",
    "current_device",
    "_is_in_bad_fork",
    "manual_seed_all",
    "get_rng_state",
    "set_rng_state",
    "get_amp_supported_dtype",
)
"""What torch calls on ``torch.hpu``; :func:`~.install` refuses a module without them."""


class DeviceModule(types.ModuleType):
    """``torch.hpu`` of the emulated device: torch's calls answered here, the rest by the emulated SDK module."""

    def __init__(self) -> None:
        super().__init__("torch.hpu", "The emulated HPU's device module (habana_frameworks.torch.hpu underneath).")

    def __getattr__(self, name: str) -> Any:
        return getattr(_sdk_hpu, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(_sdk_hpu)))

    @staticmethod
    def is_available() -> bool:
        """Whether the emulated HPU is usable (always, once installed)."""
        return _sdk_hpu.is_available()

    @staticmethod
    def is_initialized() -> bool:
        """Always ``True``: the emulated devices need no initialisation."""
        return _sdk_hpu.is_initialized()

    @staticmethod
    def device_count() -> int:
        """The number of emulated HPUs visible to this process."""
        return _sdk_hpu.device_count()

    @staticmethod
    def current_device() -> int:
        """The index of the current emulated HPU."""
        return _sdk_hpu.current_device()

    @staticmethod
    def _is_in_bad_fork() -> bool:
        # The emulated device holds no driver state that a fork could break.
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        """Seed the generator the emulated HPUs draw from (the backing device's)."""
        _sdk_hpu.manual_seed_all(seed)

    @staticmethod
    def get_rng_state(device: int | str | torch.device = "hpu") -> torch.Tensor:
        """The state of the generator the emulated HPUs draw from."""
        return _sdk_hpu.get_rng_state(device)

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "hpu") -> None:
        """Restore a state returned by :meth:`get_rng_state`."""
        _sdk_hpu.set_rng_state(new_state, device)

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        """The autocast dtypes of Gaudi: bfloat16 and float16."""
        return [torch.bfloat16, torch.float16]


class Hooks(torch._C._acc.PrivateUse1Hooks):
    """PrivateUse1 hooks: the emulated backend is built and available."""

    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class DeviceGuard(torch._C._acc.DeviceGuard):
    """The PrivateUse1 device guard; only the device type is answered from Python (see the module docstring)."""

    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1
