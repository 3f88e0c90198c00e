"""Emulation of ``habana_frameworks.torch.dynamo``: the SDK's ``torch.compile`` support.

The backend lives in :mod:`.compile_backend`, as in the SDK; importing that package registers ``hpu_backend``.
"""

from __future__ import annotations

from .. import _not_emulated

__all__: list[str] = []

_not_emulated.provide(globals(), "habana_frameworks.torch.dynamo")
# The SDK's dynamo package binds its trace_rules submodule (not emulated: importing it refuses by name).
trace_rules = _not_emulated._NotEmulatedValue(
    "habana_frameworks.torch.dynamo.trace_rules",
    _not_emulated.module_reason("habana_frameworks.torch.dynamo.trace_rules") or "",
)
