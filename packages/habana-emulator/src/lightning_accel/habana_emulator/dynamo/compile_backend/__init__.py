"""Emulation of ``habana_frameworks.torch.dynamo.compile_backend``; importing it registers ``hpu_backend``.

Source: gaudi-pytorch-bridge ``python_packages/habana_frameworks/torch/dynamo/compile_backend/__init__.py``
(v1.19.0), which imports ``backends`` for its registration side effect.
"""

from __future__ import annotations

from ... import _not_emulated
from . import backends

__all__ = ["backends"]

_not_emulated.provide(globals(), "habana_frameworks.torch.dynamo.compile_backend")
