"""What compiling does to the host model's other tensors: poptorch moves the whole module tree to ``ipu:0``.

poptorch 3.4 compiles by moving the model to the IPU (``self._model.to(torch.device("ipu:0"))``,
``python/_poplar_executor.py:737-739``), tracing it, and moving back only the parameters and buffers
(``:894-916``). Any other tensor that a module's ``_apply`` moves stays an IPU tensor: torchmetrics' ``Metric._apply``
moves the metric states, their defaults and cached results. Outside a compile, an operation on an IPU tensor reaches
poptorch's fallback kernel, which raises "There is no active dispatch"
(``poptorch/source/dispatch_tracer/RegisterAtenOverloads.cpp:100-103, 441-449, 675``); only copies between the host
and the IPU work (``:224-263``).

The emulator has no IPU device, so such a tensor becomes an :class:`IPUTensor`: a host tensor that refuses every
operation outside a compile as poptorch does, except the copies (``.cpu()``, ``.to(device)``, ``copy_``) and
reading its metadata.
"""

from __future__ import annotations

from typing import Any

import torch

from .errors import Error
from .tracing import current_context

__all__ = ["IPUTensor", "move_model_to_ipu"]

_NO_DISPATCH = "There is no active dispatch"
# Reading metadata runs no kernel.
_IN_PLACE = frozenset({"__iadd__", "__isub__", "__imul__", "__itruediv__", "__setitem__"})
_METADATA = frozenset({"__get__", "size", "dim", "numel", "__len__", "is_floating_point", "is_complex", "element_size"})


class IPUTensor(torch.Tensor):
    """A tensor left on the IPU after a compile: every operation but a copy to or from the host raises.

    Example:
        >>> moved = torch.ones(2).as_subclass(IPUTensor)
        >>> moved.cpu().tolist()
        [1.0, 1.0]
        >>> try:
        ...     moved + 1
        ... except Error as err:
        ...     print(err.message)
        There is no active dispatch
    """

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        copies = name in ("cpu", "copy_") or (name == "to" and not _changes_dtype(args[1:], kwargs))
        # While a model is compiled, operations on IPU tensors are traced into its graph.
        if name not in _METADATA and not copies and current_context() is None:
            raise Error(_NO_DISPATCH)
        if current_context() is not None:
            # In the trace, an IPU tensor is a constant of the graph (the tracer takes no tensor subclass).
            args, kwargs = torch.utils._pytree.tree_map(_plain, (args, kwargs))
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if (name == "copy_" or (name.endswith("_") and not name.startswith("_")) or name in _IN_PLACE) and args:
            return args[0]
        if isinstance(out, torch.Tensor) and type(out) is not torch.Tensor:
            return out.as_subclass(torch.Tensor)
        return out

    def __repr__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        return f"IPUTensor(shape={tuple(self.shape)}, dtype={self.dtype}, device='ipu:0')"


def _plain(value: Any) -> Any:
    if not isinstance(value, IPUTensor):
        return value
    # The host tensor it was made from (same memory): a view made now would be an operation of the trace, which
    # torch 2.0's tracer refuses on a tensor subclass.
    host = value.__dict__.get("_host")
    return host if host is not None else value.as_subclass(torch.Tensor)


def _changes_dtype(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return (
        "dtype" in kwargs
        or any(isinstance(arg, torch.dtype) for arg in args)
        or any(isinstance(arg, torch.Tensor) for arg in args)
    )


def move_model_to_ipu(model: torch.nn.Module) -> None:
    """Move ``model`` to the IPU and its parameters and buffers (and their gradients) back, as a compile does."""
    kept = {id(t) for t in (*model.parameters(), *model.buffers())}
    kept |= {id(p.grad) for p in model.parameters() if p.grad is not None}

    def to_ipu(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) in kept or isinstance(tensor, IPUTensor):
            return tensor
        host = tensor.detach()
        moved = host.as_subclass(IPUTensor)
        moved.__dict__["_host"] = host
        return moved

    with torch.no_grad():
        model._apply(to_ipu)
