"""Loads the C++ device alone, in a process of its own, for the tests in this folder.

torch asks a device's Python module (``torch.hpu``) for lazy initialisation before it makes the first tensor; the
SDK's ``habana_frameworks.torch.hpu`` is that module on Gaudi, and the emulated SDK registers its own. These tests
check the device without the SDK, so a minimal stand-in with the SDK's answers for one card is registered here.
"""

from __future__ import annotations

import json
import os
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
    """The script's result, as one JSON line on stdout; then the process ends, without the interpreter's teardown.

    Why: torch 2.13 keeps a Python object (the ``contextvars`` context that ``_engine_run_backward`` stashes) in each
    backward's thread-local state, and the autograd thread of a non-CPU device (here the HPU's, as on Gaudi and
    CUDA) may drop the last reference to it after the main thread has moved on. When the script ends within a few
    milliseconds of its last backward, that thread takes the GIL during finalization, Python ends the thread, and the
    process aborts with "terminate called without an active exception" (pytorch/pytorch#180701). It is a race in
    torch, not a fault of the device, so the scripts, which always report last, leave right after reporting.
    """
    sys.stdout.write(json.dumps(values) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
