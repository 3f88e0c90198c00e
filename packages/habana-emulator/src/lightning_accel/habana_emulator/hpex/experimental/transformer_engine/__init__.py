"""Emulation of ``habana_frameworks.torch.hpex.experimental.transformer_engine``: fp8 training on Gaudi2 and later.

``Linear`` computes its matrix products on fp8 operands inside ``fp8_autocast(enabled=True, fp8_recipe=...)``, with
delayed scaling (``recipe.DelayedScaling``). The public surface is the SDK's, module by module (gaudi-pytorch-bridge
1.18.0 ``f90046f``, the newest release whose Transformer Engine source is public; from 1.19 the package re-exports the
separate ``intel_transformer_engine``, ``transformer_engine/__init__.py:27-35``): this package exports ``Linear`` and
``fp8_autocast``; ``fp8`` has ``check_fp8_support()`` and ``FP8GlobalStateManager.is_fp8_available()`` (and no
module-level ``is_fp8_available``), ``recipe``, ``constants``, ``utils``, ``cpp_extensions`` (on the SDK's fp8
operators; ``fp8_gelu`` refuses), ``distributed`` (tensor-parallel helpers, fp8-aware ``checkpoint``) and
``numerics_debug`` their names, and ``module.base`` the layers' base class. ``FusedAttention``
(``module.attention``) runs attention on fp8 q, k and v inside ``fp8_autocast`` (the emulated fp8 attention kernel,
``hpex.kernels.Fp8FusedSDPA``) and the bf16 ``FusedSDPA`` outside it.

Example:
    >>> import torch
    >>> import habana_frameworks.torch.hpex.experimental.transformer_engine as te
    >>> from habana_frameworks.torch.hpex.experimental.transformer_engine.recipe import DelayedScaling, Format
    >>> layer = te.Linear(16, 16)
    >>> with te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling(fp8_format=Format.HYBRID)):
    ...     out = layer(torch.randn(4, 16, device="hpu"))  # doctest: +SKIP
"""

from __future__ import annotations

# The submodules are attributes of the package, as importing them makes them on the SDK.
from . import constants as constants
from . import cpp_extensions as cpp_extensions
from . import distributed as distributed
from . import fp8 as fp8
from . import module as module
from . import recipe as recipe
from . import utils as utils
from .distributed import checkpoint
from .fp8 import fp8_autocast
from .module import FusedAttention, Linear

__all__ = ["FusedAttention", "Linear", "checkpoint", "fp8_autocast"]
