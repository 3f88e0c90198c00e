"""Emulation of ``habana_frameworks.torch.hpex.optimizers``: the SDK's fused optimizers.

``FusedAdamW``, ``FusedSGD``, ``FusedAdagrad`` and ``FusedLamb`` are emulated: the SDK's Python classes with the
arithmetic of their TPC kernels run as torch operations (``hpex/_fused_ops.py``). ``FusedLars``,
``FusedResourceApplyMomentum`` and the mark-step ``Adam`` / ``AdamW`` (lazy-mode graph tuning) are here, as on the
SDK, and refuse by name when used.

Example:
    >>> import torch
    >>> from habana_frameworks.torch.hpex.optimizers import FusedAdamW
    >>> optimizer = FusedAdamW(torch.nn.Linear(4, 2).to("hpu").parameters(), lr=1e-3)
"""

from ..._not_emulated import provide as _provide
from .._shadowing import keep_classes as _keep_classes
from .FusedAdagrad import FusedAdagrad
from .FusedAdamW import FusedAdamW
from .FusedLamb import FusedLamb
from .FusedSGD import FusedSGD

__all__ = ["FusedAdagrad", "FusedAdamW", "FusedLamb", "FusedSGD"]

# The SDK's other names of this package are here and refuse when used; importing the submodule under the SDK's name
# must not replace a class of the same name (see _shadowing).
_provide(globals(), "habana_frameworks.torch.hpex.optimizers")
_keep_classes(__name__)
