"""Emulation of ``habana_frameworks.torch.hpex``, the SDK's extensions.

Habana Mixed Precision (``hpex.hmp``) is gone from current SDKs (not in the 1.18 or 1.19 bridge sources; optimum-habana
dropped it with Synapse 1.13), so it is not emulated either: mixed precision is ``torch.autocast("hpu")`` with the
SDK's operator lists.
"""

from __future__ import annotations

__all__: list[str] = []
