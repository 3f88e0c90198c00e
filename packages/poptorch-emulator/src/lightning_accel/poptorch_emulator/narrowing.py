"""Inside an IPU graph there is no int64 or float64: poptorch narrows them to int32 and float32 as they are made.

poptorch allocates every IPU tensor with the coerced type (``coerceToSupportedType``, ``poptorch/source/Utils.cpp:
141-151``; ``dispatch_tracer/Tensor.cpp:338-347``): an input, a constant or an operator's result that would be int64
is int32 on the device, float64 is float32. The model's Python sees it while it is traced (``x.dtype ==
torch.int64`` is ``False``), and int32 arithmetic wraps where int64 would not.

The emulator's trace does the same with a dispatch mode under the tracer: every int64/float64 result of an operator
is converted to int32/float32 in the graph, and the graph's int64/float64 inputs are converted on entry. The few
operators whose torch kernels take int64 indices only get their index argument widened, as poptorch widens it for
its meta kernels (``TypeInferenceHandler::indexArgToUpcast``, ``dispatch_tracer/TypeInferenceHandler.cpp:277-307``).
Weights and buffers keep their type: poptorch's are narrowed on upload, but the emulator's in-place updates of
buffers (BatchNorm's ``num_batches_tracked``) must write the host's tensor.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .errors import Error
from .lowering import lowers, message

__all__ = ["NARROWED", "Narrowing", "adapt_call", "narrow"]

NARROWED = {torch.int64: torch.int32, torch.float64: torch.float32}
_aten = torch.ops.aten
# Operator -> position of the index argument its torch kernel wants as int64 (poptorch's list, with the forms
# torch 2.13 records for the same calls).
_WIDEN_NAMES = (
    ("gather", "default", 2),
    ("scatter", "src", 2),
    ("scatter", "value", 2),
    ("scatter", "reduce", 2),
    ("scatter", "value_reduce", 2),
    ("scatter_", "src", 2),
    ("scatter_", "value", 2),
    ("scatter_", "reduce", 2),
    ("scatter_", "value_reduce", 2),
    ("scatter_add", "default", 2),
    ("scatter_add_", "default", 2),
    ("scatter_reduce", "two", 2),
    ("scatter_reduce_", "two", 2),
    ("nll_loss_forward", "default", 1),
    ("nll_loss2d_forward", "default", 1),
    ("take_along_dim", "default", 1),
    ("index", "Tensor", 1),
    ("index_put", "default", 1),
    ("index_put_", "default", 1),
    ("_unsafe_index", "Tensor", 1),
    ("index_select", "default", 2),
    ("embedding", "default", 1),
)
# Looked up by name: an operator the running torch lacks (aten::_unsafe_index is newer than poptorch's torch 2.0.1)
# cannot be recorded, so it needs no entry.
_WIDEN = {
    getattr(getattr(_aten, op), overload): position
    for op, overload, position in _WIDEN_NAMES
    if hasattr(_aten, op) and hasattr(getattr(_aten, op), overload)
}


def narrow(value: Any) -> Any:
    """``value`` as the IPU holds it: an int64/float64 tensor converted to int32/float32, anything else unchanged."""
    if isinstance(value, torch.Tensor) and value.dtype in NARROWED:
        return value.to(NARROWED[value.dtype])
    return value


def _widen(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype == torch.int32:
        return value.long()
    if isinstance(value, (list, tuple)):
        return type(value)(_widen(item) for item in value)
    return value


# Set while the emulator itself widens a call's indices (adapt_call): that conversion is not the model's.
_keep_wide: ContextVar[bool] = ContextVar("poptorch_emulator_keep_wide", default=False)


class Narrowing(TorchDispatchMode):
    """While active, every operator's int64/float64 results come out as int32/float32 (in-place ones excepted)."""

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        # The dispatcher's own query: OpOverload.has_kernel_for_dispatch_key is newer than poptorch's torch 2.0.1.
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), torch._C.DispatchKey.CompositeImplicitAutograd):
            # A composite reaching the modes (the tracer decomposes it) runs its parts under this mode too.
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        position = _WIDEN.get(func)
        if position is not None and position < len(args):
            args = (*args[:position], _widen(args[position]), *args[position + 1 :])
        elif func.namespace == "aten" and not lowers(func):
            # poptorch refuses the graph once traced, naming this operator: let its torch kernel run until then.
            args, kwargs = _widen((args, kwargs))
        out = func(*args, **kwargs)
        if func._schema.is_mutable or _keep_wide.get():
            # An in-place or out= result is one of the arguments: it keeps its type.
            return out
        return torch.utils._pytree.tree_map(narrow, out)


def adapt_call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A torch function's arguments as poptorch takes the call, for functions torch decomposes before dispatch.

    ``one_hot`` needs its number of classes (poptorch's meta kernel, ``RegisterMetaOps.cpp.inc:174-180``) and takes
    the int32 indices every IPU tensor holds; torch's composite kernel checks for int64 before any operator runs.

    Raises:
        Error: For ``one_hot`` without ``num_classes``, with poptorch's text.
    """
    if name == "one_hot":
        classes = kwargs.get("num_classes", args[1] if len(args) > 1 else -1)
        if classes == -1:
            raise Error(message("one_hot_num_classes"))
        token = _keep_wide.set(True)
        try:
            args = (_widen(args[0]), *args[1:])
        finally:
            _keep_wide.reset(token)
    return args, kwargs
