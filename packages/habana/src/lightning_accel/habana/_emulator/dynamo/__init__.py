"""Emulation of ``habana_frameworks.torch.dynamo``: the SDK's ``torch.compile`` support.

The backend lives in :mod:`.compile_backend`, as in the SDK; importing that package registers ``hpu_backend``.
"""

from __future__ import annotations

__all__: list[str] = []
