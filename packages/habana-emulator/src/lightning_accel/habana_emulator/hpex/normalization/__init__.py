"""Emulation of ``habana_frameworks.torch.hpex.normalization``: fused gradient clipping; ``FusedRMSNorm`` refuses.

``FusedClipNorm`` is emulated (:mod:`.FusedClipNorm`). ``FusedRMSNorm`` and ``RmsNormBwdMode`` (the fused RMS
normalization kernel) are here, as on the SDK, and refuse by name when used.

Example:
    >>> import torch
    >>> from habana_frameworks.torch.hpex.normalization import FusedClipNorm
    >>> clipper = FusedClipNorm(torch.nn.Linear(4, 2).to("hpu").parameters(), max_norm=1.0)
"""

from ..._not_emulated import provide as _provide
from .._shadowing import keep_classes as _keep_classes
from .FusedClipNorm import FusedClipNorm

__all__ = ["FusedClipNorm"]

# The SDK's other names of this package are here and refuse when used; importing the submodule under the SDK's name
# must not replace a class of the same name (see _shadowing).
_provide(globals(), "habana_frameworks.torch.hpex.normalization")
_keep_classes(__name__)
