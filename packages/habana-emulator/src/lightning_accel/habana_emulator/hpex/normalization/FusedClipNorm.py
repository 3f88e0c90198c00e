"""Emulation of ``habana_frameworks.torch.hpex.normalization.FusedClipNorm``: fused gradient clipping by norm.

The SDK (gaudi-pytorch-bridge 1.19.0, ``hpex/normalization/FusedClipNorm.py``) computes the total L2 norm of all
gradients and scales them in place in one ``torch.ops.hpu.fused_clip_norm`` kernel. The norm type is fixed at 2.
``max_norm`` is a tensor of the first parameter's dtype made at construction; ``clip_norm(parameters)`` clips the
gradients of ``parameters`` (a tensor or an iterable) and returns the total norm before clipping (a CPU
``tensor(0.)`` when no parameter has a gradient). The emulator runs the kernel's formula with torch operations, with
torch's coefficient ``max_norm / (norm + 1e-6)`` clamped at 1 (``hpex/_fused_ops.py``), so it matches
``torch.nn.utils.clip_grad_norm_``.

Example:
    >>> import torch
    >>> from habana_frameworks.torch.hpex.normalization import FusedClipNorm
    >>> model = torch.nn.Linear(4, 2).to("hpu")
    >>> clipper = FusedClipNorm(model.parameters(), max_norm=1.0)
    >>> model(torch.randn(3, 4, device="hpu")).sum().backward()
    >>> norm = clipper.clip_norm(model.parameters())
"""

from collections.abc import Iterable
from typing import Any

import torch

from ... import core as htcore
from ... import hpu as hthpu  # noqa: F401  # the SDK's module has it
from ...utils.internal import is_lazy  # noqa: F401  # the SDK's module has it
from .. import _fused_ops

__all__ = ["FusedClipNorm"]


class FusedClipNorm:
    """Clip gradients by their total L2 norm, in one fused kernel on Gaudi.

    Args:
        parameters: The parameters; the first one's dtype is the dtype of ``max_norm``.
        max_norm: The largest total norm the gradients keep.

    Example:
        >>> import torch
        >>> from habana_frameworks.torch.hpex.normalization import FusedClipNorm
        >>> model = torch.nn.Linear(4, 2).to("hpu")
        >>> clipper = FusedClipNorm(model.parameters(), max_norm=1.0)
    """

    def __init__(self, parameters: Iterable[torch.nn.parameter.Parameter], max_norm: Any) -> None:
        params_list = list(parameters)
        self.dtype = params_list[0].dtype if params_list else torch.float32
        self.max_norm_t = (torch.ones(1) * max_norm).to(self.dtype).to(torch.device("hpu"))
        self.norm_type = 2.0

    def clip_norm(self, parameters: torch.Tensor | Iterable[torch.Tensor]) -> torch.Tensor:
        """Scale the gradients of ``parameters`` in place so that their total norm is at most ``max_norm``.

        Returns:
            The total norm before clipping.
        """
        htcore.step_closure._mark_step_if_lazy()
        if isinstance(parameters, torch.Tensor):
            grads = [parameters.grad] if parameters.grad is not None else []
        else:
            grads = [p.grad for p in parameters if p.grad is not None]
        if not grads:
            return torch.tensor(0.0)
        total_norm = _fused_ops.clip_norm(grads, self.max_norm_t)
        htcore.step_closure._mark_step_if_lazy()
        # The eager kernel writes the norm into a one-element placeholder of the parameters' dtype.
        return total_norm.reshape(1).to(self.dtype)
