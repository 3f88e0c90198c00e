"""Per-operator mixed precision on the backing device: the emulator's HMP and HPU autocast.

Habana Mixed Precision (HMP) and the SDK's autocast decide, operator by operator, whether the inputs of an operation
are cast to bfloat16 (or float16) or to float32 before it runs. The emulator makes the same decisions with a
:class:`torch.overrides.TorchFunctionMode`, which sees every call of a ``torch``, ``torch.nn.functional`` or
``torch.Tensor`` function by name (the names HMP's operator lists use). It works at the Python level, above
autograd, so the casts are recorded by autograd and gradients flow back to float32 parameters in their own dtype.

Decisions, for an operation named ``op`` (dunder names such as ``__matmul__`` are matched as ``matmul``):

* ``op`` in the float32 list: floating-point inputs are cast to float32;
* ``op`` in the lower-precision list: floating-point inputs are cast to the lower dtype;
* otherwise, at ``opt_level="O1"`` the operation runs on its inputs as they are; at ``"O2"`` it is cast to the lower
  dtype unless it only moves, views or converts data (casting those would change their meaning, see ``_NEVER_CAST``).

In-place operations are never cast: a cast copy would receive the update instead of the tensor.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from .._operators import known_operators, operator_name

__all__ = [
    "DEFAULT_FP32_OPS",
    "DEFAULT_LOWER_OPS",
    "CastPolicy",
    "autocast",
    "casts_enabled",
    "disable_casts",
    "enable_globally",
    "known_operators",
    "operator_name",
]

logger = logging.getLogger("lightning_accel.habana.precision")

# Operations that move, view, inspect or convert data: casting their inputs would break views (a cast is a copy) or
# undo an explicit conversion, so O2 leaves them alone.
_NEVER_CAST = frozenset(
    {
        "to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long", "bool", "cpu", "cuda",
        "detach", "clone", "contiguous", "requires_grad", "size", "dim", "numel", "item", "tolist", "numpy",
        "element_size", "data_ptr", "is_floating_point", "is_complex", "stride", "storage_offset", "backward",
        "get", "set", "setitem", "getitem", "len", "iter", "repr", "format", "hash", "reduce_ex",
        "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose",
        "permute", "t", "expand", "expand_as", "narrow", "select", "split", "chunk", "unbind", "movedim",
        "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "empty_like", "zeros_like", "ones_like",
        "full_like", "storage", "untyped_storage", "register_hook", "retain_grad", "eq", "ne", "lt", "le", "gt",
        "ge", "argmax", "argmin", "nonzero", "one_hot",
    }
)  # fmt: skip

# The lists used when the user gives none, like the SDK's built-in autocast lists: matrix products and convolutions
# in the lower dtype; reductions, normalisations, exponentials and losses in float32.
DEFAULT_LOWER_OPS = frozenset(
    {
        "addbmm", "addmm", "addmv", "baddbmm", "bmm", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
        "conv_transpose2d", "conv_transpose3d", "dot", "einsum", "linear", "matmul", "mm", "mv",
        "scaled_dot_product_attention",
    }
)  # fmt: skip
DEFAULT_FP32_OPS = frozenset(
    {
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_similarity", "cross_entropy", "cumsum",
        "exp", "group_norm", "kl_div", "l1_loss", "layer_norm", "log", "log_softmax", "logsumexp", "mse_loss",
        "nll_loss", "norm", "pow", "smooth_l1_loss", "softmax", "softplus", "sum", "prod", "rsqrt", "sqrt",
    }
)  # fmt: skip


@dataclass(frozen=True)
class CastPolicy:
    """Which operations run in which dtype.

    Attributes:
        lower_dtype: ``torch.bfloat16`` or ``torch.float16``.
        lower_ops: Operations whose floating-point inputs are cast to ``lower_dtype``.
        fp32_ops: Operations whose floating-point inputs are cast to float32 (wins over ``lower_ops``).
        opt_level: ``"O1"`` (only listed operations are cast) or ``"O2"`` (everything but ``fp32_ops`` is lowered).
        verbose: Log the first decision for every operation name (logger ``lightning_accel.habana.precision``).
    """

    lower_dtype: torch.dtype = torch.bfloat16
    lower_ops: frozenset[str] = frozenset()
    fp32_ops: frozenset[str] = frozenset()
    opt_level: str = "O1"
    verbose: bool = False
    _reported: set[tuple[str, str]] = field(default_factory=set, compare=False, hash=False, repr=False)

    def target(self, name: str) -> tuple[torch.dtype | None, str]:
        """The dtype the inputs of operation ``name`` are cast to (``None``: left alone), and why."""
        if name in self.fp32_ops:
            return torch.float32, "fp32 list"
        if name in self.lower_ops:
            return self.lower_dtype, "lower-precision list"
        if self.opt_level == "O2" and name not in _NEVER_CAST and not name.endswith("_"):
            return self.lower_dtype, "O2 default"
        return None, "not listed"

    def report(self, name: str, dtype: torch.dtype | None, reason: str) -> None:
        key = (name, reason)
        if self.verbose and key not in self._reported:
            self._reported.add(key)
            logger.info("HPU mixed precision: %s runs in %s (%s)", name, dtype or "its input dtype", reason)


class _State(threading.local):
    def __init__(self) -> None:
        # Innermost wins: a policy casts, None (from disable_casts) does not.
        self.stack: list[CastPolicy | None] = []
        self.mode: _CastMode | None = None


_state = _State()


def casts_enabled() -> bool:
    """Whether operations are being cast right now on this thread."""
    return bool(_state.stack) and _state.stack[-1] is not None


class _CastMode(TorchFunctionMode):
    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        policy = _state.stack[-1] if _state.stack else None
        # Direct calls of ATen overloads (torch.ops.aten.*) are below the Python API HMP patches: never cast them.
        if policy is None or isinstance(func, torch._ops.OpOverload):
            return func(*args, **kwargs)
        name = operator_name(func)
        # In-place operations and setters must act on the tensor itself, never on a cast copy.
        if not name or name.endswith("_") or getattr(func, "__name__", "").startswith("__i"):
            return func(*args, **kwargs)
        dtype, reason = policy.target(name)
        policy.report(name, dtype, reason)
        if dtype is None:
            return func(*args, **kwargs)

        def cast(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
                return value.to(dtype)
            return value

        return func(*tree_map(cast, args), **tree_map(cast, kwargs))


@contextmanager
def _pushed(entry: CastPolicy | None) -> Iterator[None]:
    state = _state
    entered = state.mode is None
    if entered:
        state.mode = _CastMode()
        state.mode.__enter__()
    state.stack.append(entry)
    try:
        yield
    finally:
        state.stack.pop()
        if entered and state.mode is not None:
            state.mode.__exit__(None, None, None)
            state.mode = None


def autocast(policy: CastPolicy) -> Any:
    """Cast operations by ``policy`` inside the block (the emulator's ``torch.autocast(device_type="hpu")``)."""
    return _pushed(policy)


def disable_casts() -> Any:
    """No casts inside the block, even within :func:`autocast` (HMP's ``disable_casts``)."""
    return _pushed(None)


def enable_globally(policy: CastPolicy) -> None:
    """Cast by ``policy`` from now on in this thread (HMP's ``convert``, which patches operators for good)."""
    context = _pushed(policy)
    context.__enter__()
