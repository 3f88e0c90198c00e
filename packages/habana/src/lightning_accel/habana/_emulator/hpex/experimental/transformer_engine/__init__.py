"""Emulation of ``habana_frameworks.torch.hpex.experimental.transformer_engine``: fp8 training on Gaudi2 and later.

``Linear`` computes its matrix products on fp8 operands inside ``fp8_autocast(enabled=True, fp8_recipe=...)``, with
delayed scaling (``recipe.DelayedScaling``); ``fp8.is_fp8_available()`` says whether the emulated generation has fp8
(``LIGHTNING_ACCEL_EMULATE_HPU_TYPE``). The exports are the SDK's (gaudi-pytorch-bridge 1.18.0,
``transformer_engine/__init__.py``: ``fp8_autocast``, ``Linear``, with the ``fp8`` and ``recipe`` submodules);
``FusedAttention`` and ``distributed.checkpoint`` are not emulated.

Example:
    >>> import torch
    >>> import habana_frameworks.torch.hpex.experimental.transformer_engine as te
    >>> from habana_frameworks.torch.hpex.experimental.transformer_engine.recipe import DelayedScaling, Format
    >>> layer = te.Linear(16, 16)
    >>> with te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling(fp8_format=Format.HYBRID)):
    ...     out = layer(torch.randn(4, 16, device="hpu"))  # doctest: +SKIP
"""

from __future__ import annotations

from . import fp8, recipe
from .fp8 import fp8_autocast
from .module import Linear

__all__ = ["Linear", "fp8", "fp8_autocast", "recipe"]
