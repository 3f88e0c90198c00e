"""Loads the C++ device alone, in a process of its own, for the tests in this folder.

torch asks a device's Python module (``torch.hpu``) for lazy initialisation before it makes the first tensor; the
SDK's ``habana_frameworks.torch.hpu`` is that module on Gaudi, and the emulated SDK registers its own. These tests
check the device without the SDK, so a minimal stand-in with the SDK's answers for one card is registered here.
"""

from __future__ import annotations

import json
import sys
import types

import torch

from lightning_accel import emulated_hpu

device = emulated_hpu.load()

_module = types.ModuleType("torch.hpu")
_module.is_available = lambda: True
_module.device_count = lambda: 1
_module.current_device = lambda: 0
_module.is_initialized = lambda: True
_module._is_in_bad_fork = lambda: False
_module._lazy_init = lambda: None
torch._register_device_module("hpu", _module)


def report(**values: object) -> None:
    """The script's result, as one JSON line on stdout."""
    sys.stdout.write(json.dumps(values) + "\n")
