"""Emulation of ``habana_frameworks.torch.hpex.kernels``: the SDK's fused kernels; only the attention ones are emulated.

``FusedSDPA`` (fused scaled-dot-product attention) is emulated with the SDK's wrapper and torch arithmetic
(:mod:`.FusedSDPA`), and so is fp8 attention (``fp8_fused_sdpa``, ``fp8_sdpa_fwd_wrapper``, ``fp8_sdpa_bwd_wrapper``:
:mod:`.Fp8FusedSDPA`, on the exactly dequantized fp8 inputs). The package's other names (CTC loss, custom softmax,
rotary embedding helpers, the Python SDPA variants) are TPC kernels the emulator does not have: they are here, as on
the SDK, and refuse by name when used (``_not_emulated.NAMES``); their modules refuse on import.

Example:
    >>> import torch
    >>> from habana_frameworks.torch.hpex.kernels import FusedSDPA
    >>> q = torch.randn(1, 2, 4, 8, device="hpu")
    >>> FusedSDPA.apply(q, q, q, None, 0.0, True).shape  # doctest: +SKIP
    torch.Size([1, 2, 4, 8])
"""

from ..._not_emulated import provide as _provide
from ...utils.internal import is_lazy
from .._shadowing import keep_classes as _keep_classes
from .Fp8FusedSDPA import fp8_fused_sdpa, fp8_sdpa_bwd_wrapper, fp8_sdpa_fwd_wrapper
from .FusedSDPA import FusedSDPA, gqa_output_reshape

__all__ = [
    "FusedSDPA",
    "fp8_fused_sdpa",
    "fp8_sdpa_bwd_wrapper",
    "fp8_sdpa_fwd_wrapper",
    "gqa_output_reshape",
    "is_lazy",
]

# The SDK's other names of this package are here and refuse when used; importing the submodule under the SDK's name
# must not replace a class of the same name (see _shadowing).
_provide(globals(), "habana_frameworks.torch.hpex.kernels")
_keep_classes(__name__)
