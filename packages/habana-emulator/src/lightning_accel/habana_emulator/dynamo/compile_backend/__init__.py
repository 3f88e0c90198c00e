"""Emulation of ``habana_frameworks.torch.dynamo.compile_backend``; importing it registers ``hpu_backend``.

Source: gaudi-pytorch-bridge ``python_packages/habana_frameworks/torch/dynamo/compile_backend/__init__.py``
(v1.19.0), which imports ``backends`` for its registration side effect and, when ``PT_HPU_ENABLE_COMPILED_AUTOGRAD``
is set, turns compiled autograd on (``:20-23``).
"""

from __future__ import annotations

import os

from ... import _not_emulated
from . import backends
from .experimental import enable_compiled_autograd

__all__ = ["backends", "enable_compiled_autograd"]

# The SDK reads the flag through its bridge configuration (a C++ env flag: a boolean).
if os.environ.get("PT_HPU_ENABLE_COMPILED_AUTOGRAD", "").strip().lower() in ("1", "true", "on", "yes", "y", "t"):
    enable_compiled_autograd()

_not_emulated.provide(globals(), "habana_frameworks.torch.dynamo.compile_backend")
