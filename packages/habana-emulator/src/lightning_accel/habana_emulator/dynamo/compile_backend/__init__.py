"""Emulation of ``habana_frameworks.torch.dynamo.compile_backend``; importing it registers ``hpu_backend``.

Source: gaudi-pytorch-bridge ``python_packages/habana_frameworks/torch/dynamo/compile_backend/__init__.py``
(v1.19.0), which imports ``backends`` for its registration side effect and, when ``PT_HPU_ENABLE_COMPILED_AUTOGRAD``
is set, imports ``enable_compiled_autograd`` from ``experimental`` and turns compiled autograd on (``:23-26``).
"""

from __future__ import annotations

import os

from ... import _not_emulated
from . import backends

__all__ = ["backends"]

# The SDK reads the flag through its bridge configuration (a C++ env flag: a boolean), and binds the function here only
# to call it (``:23-26``): without the flag, ``compile_backend.enable_compiled_autograd`` is an AttributeError on Gaudi.
if os.environ.get("PT_HPU_ENABLE_COMPILED_AUTOGRAD", "").strip().lower() in ("1", "true", "on", "yes", "y", "t"):
    from .experimental import enable_compiled_autograd

    enable_compiled_autograd()

_not_emulated.provide(globals(), "habana_frameworks.torch.dynamo.compile_backend")
