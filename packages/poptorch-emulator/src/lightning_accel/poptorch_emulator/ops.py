"""poptorch's operators (``poptorch.identity_loss``, ``nop``, ``dynamic_slice``, ...) as the emulated device runs them.

Compiler hints (``set_available_memory``, ``recomputationCheckpoint``, ``serializedMatMul``'s splitting, overlap
modes) return their inputs' values: they change how Poplar lays out and schedules the graph, not what it computes.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable
from typing import Any

import torch

from lightning_accel.core.pycompat import strict_zip

from .enums import MatMulSerializationMode, OverlapMode
from .errors import Error
from .structures import flatten, unflatten
from .tracing import current_context

__all__ = [
    "ATTR_PREFIX",
    "attributes_lists",
    "cond",
    "createPoptorchError",
    "dynamic_slice",
    "dynamic_update",
    "flattenTensorStructure",
    "for_loop",
    "identity_loss",
    "ipu_print_tensor",
    "isRunningOnIpu",
    "logger",
    "module_repr",
    "nop",
    "poptorchAtExit",
    "print",
    "recomputationCheckpoint",
    "reconstructTensorStructure",
    "serializedMatMul",
    "setLogLevel",
    "set_available_memory",
    "set_overlap_for_input",
    "set_overlap_for_output",
]

_REDUCTIONS = ("sum", "mean", "none")
ATTR_PREFIX = "attr:"
attributes_lists: list[dict[str, Any]] = []
logger = logging.getLogger("poptorch")


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """Mark ``x`` (reduced by ``"sum"``, ``"mean"`` or ``"none"``) as the final loss; backward seeds it with ones.

    Example:
        >>> identity_loss(torch.tensor([1.0, 3.0]), reduction="mean")
        tensor(2.)
    """
    # An assert in poptorch 3.4 (ops.py:1041-1047).
    assert reduction in _REDUCTIONS, "Unsupported reduction type!"
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"identity_loss takes a tensor, got {type(x).__name__}.")
    out = x.sum() if reduction == "sum" else x.mean() if reduction == "mean" else x * 1
    context = current_context()
    if context is not None:
        context.add_loss(out)
    return out


def createPoptorchError(msg: str) -> Error:
    """A ``poptorch.Error`` of type ``poptorch_py_error`` (poptorch 3.4 ``_impl.py:67-73``).

    Example:
        >>> createPoptorchError("bad").message
        'bad'
    """
    return Error(msg)


def isRunningOnIpu() -> bool:
    """``True`` while the model runs on the (emulated) IPU, ``False`` on the host.

    Example:
        >>> isRunningOnIpu()
        False
    """
    return current_context() is not None


def _tensor(name: str, value: Any) -> None:
    if not isinstance(value, torch.Tensor):
        raise createPoptorchError(f"{name} must take a torch.tensor argument. {type(value)} is not supported.")


def nop(tensor: torch.Tensor) -> torch.Tensor:
    """An operation that does nothing and is never optimised away (a debugging aid).

    Example:
        >>> nop(torch.ones(2)).tolist()
        [1.0, 1.0]
    """
    _tensor("nop", tensor)
    return tensor * 1


def ipu_print_tensor(
    tensor: torch.Tensor,
    title: str = "",
    print_gradient: bool = True,
    summarise_threshold: int = 1000,
    edge_items: int = 3,
    max_line_width: int = 80,
    digits: int = 4,
    float_format: str = "auto",
    separator: str = ", ",
    open_bracket: str = "(",
    close_bracket: str = ")",
) -> torch.Tensor:
    """Print ``tensor`` from the device on every call; the emulator returns it (its values print on the host).

    Example:
        >>> ipu_print_tensor(torch.ones(1), "x").tolist()
        [1.0]
    """
    _tensor("ipu_print_tensor", tensor)
    return tensor * 1


def _all_tensors(values: Any) -> None:
    for value in values:
        if not isinstance(value, torch.Tensor):
            raise ValueError("All inputs must be tensors")  # poptorch 3.4 ops.py:375-377


def recomputationCheckpoint(*tensors: torch.Tensor) -> Any:
    """Mark a recomputation checkpoint in a pipelined model (scheduling only)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        _all_tensors(tensors[0])
        return type(tensors[0])(t * 1 for t in tensors[0])
    _all_tensors(tensors)
    out = tuple(t * 1 for t in tensors)
    return out[0] if len(out) == 1 else out


def serializedMatMul(
    lhs: torch.Tensor, rhs: torch.Tensor, mode: MatMulSerializationMode, factor: int = 0, keep_precision: bool = False
) -> torch.Tensor:
    """``lhs @ rhs``, computed by Poplar in ``factor`` slices along the dimension ``mode`` names (memory only)."""
    # Asserts in poptorch 3.4 (ops.py:416-418).
    assert isinstance(keep_precision, bool)
    assert isinstance(factor, int)
    assert isinstance(mode, MatMulSerializationMode)
    return torch.matmul(lhs, rhs)


def set_available_memory(tensor: torch.Tensor, available_memory_proportion: float) -> torch.Tensor:
    """Limit the temporary memory of the operation producing ``tensor`` (a Poplar planning hint)."""
    _tensor("set_available_memory", tensor)
    return tensor * 1


def set_overlap_for_input(input_tensors: Any, mode: OverlapMode) -> Any:
    """Overlap the host-to-IPU transfer of these inputs with compute (IO tiles); returns them."""
    assert isinstance(mode, OverlapMode)
    return input_tensors


def set_overlap_for_output(output_tensors: Any, mode: OverlapMode) -> Any:
    """Overlap the IPU-to-host transfer of these outputs with compute (IO tiles); returns them."""
    assert isinstance(mode, OverlapMode)
    return output_tensors


def _dynamic_start(start: torch.Tensor) -> torch.Tensor:
    """The first element of ``start`` as a one-element int64 index (poptorch reshapes it to ``{1}``)."""
    return start.reshape(-1)[:1].long()


def _check_dynamic_size(size: int) -> None:
    # Compile-time checks of poptorch 3.4's canonicalisation (popart_canonicalization/SliceOps.cpp:416-460).
    if size == 0:
        raise createPoptorchError("The start and end of a slice must be different.")
    if size < 0:
        raise createPoptorchError("Taking a slice of a tensor with the end less than the start is not supported.")


def dynamic_slice(tensor: torch.Tensor, dim: int, start: torch.Tensor, size: int, step: int) -> torch.Tensor:
    """``size`` elements along ``dim`` from the position held in the tensor ``start``, every ``step``.

    On the host it is ``tensor[start:start + size:step]`` along ``dim``. On the (emulated) IPU, ``size`` must be
    positive and divide the length of ``dim``, as poptorch 3.4 requires when it compiles the slice.

    Example:
        >>> dynamic_slice(torch.arange(6.0), 0, torch.tensor([1]), 2, 2).tolist()
        [1.0]
    """
    # The argument checks of poptorch 3.4 (ops.py:301-314), in its order.
    if not isinstance(tensor, torch.Tensor):
        raise createPoptorchError(f"dynamic_slice must take a torch.tensor input. {type(tensor)} is not supported.")
    if not isinstance(dim, int):
        raise createPoptorchError("Dimension must be an integer.")
    if not isinstance(start, torch.Tensor):
        raise createPoptorchError(
            f"Slice start argument to dynamic_slice must be a torch.tensor. {type(start)} is not supported."
        )
    if not isinstance(size, int):
        raise createPoptorchError("Size must be an integer.")
    if not isinstance(step, int):
        raise createPoptorchError("Step must be an integer.")
    if not isRunningOnIpu():
        # poptorch's CPU kernel: an ordinary slice from the start's value (RegisterAtenOverloads.cpp:809-823).
        if start.is_floating_point() or start.dtype == torch.bool:
            raise createPoptorchError("Expected integer typed start tensor")
        first = int(start.reshape(-1)[0])
        return tensor[(slice(None),) * (dim % tensor.dim()) + (slice(first, first + size, step),)]
    _check_dynamic_size(size)
    if step < 1:
        raise createPoptorchError("Slicing step must be at least 1")
    length = tensor.shape[dim]
    if length % size != 0:
        raise createPoptorchError(
            f"The size of the slice ({size}) must be a factor of the slicing dimension ({length})."
        )
    # The start is a value of the graph, not of its compilation: poptorch compiles with any start (its own tests
    # compile with one past the end, tests/slice_test.py:80-84). Wrapped into range, the trace never fails on it.
    index = (_dynamic_start(start) + torch.arange(size, device=tensor.device)).remainder(length)
    # A slice of unit step, then subsampled every `step` (SliceOps.cpp subsampleSlice).
    return tensor.index_select(dim, index[::step])


def dynamic_update(input: torch.Tensor, src: torch.Tensor, dim: int, start: torch.Tensor, size: int) -> torch.Tensor:
    """``input`` with ``size`` elements along ``dim`` from position ``start`` replaced by ``src``.

    Example:
        >>> dynamic_update(torch.zeros(4), torch.ones(2), 0, torch.tensor([1]), 2).tolist()
        [0.0, 1.0, 1.0, 0.0]
    """
    # The argument checks of poptorch 3.4 (ops.py:331-354), in its order.
    if not isinstance(input, torch.Tensor):
        raise createPoptorchError(f"dynamic_update must take a torch.tensor input. {type(input)} is not supported.")
    if not isinstance(dim, int):
        raise createPoptorchError("Dimension must be an integer.")
    if not isinstance(start, torch.Tensor):
        raise createPoptorchError(
            f"Slice start argument to dynamic_update must be a torch.tensor. {type(start)} is not supported."
        )
    if not isinstance(src, torch.Tensor):
        raise createPoptorchError(
            f"Src argument to dynamic_update must be a torch.tensor. {type(src)} is not supported."
        )
    if not isinstance(size, int):
        raise createPoptorchError("Size must be an integer.")
    if input.dim() != src.dim():
        raise createPoptorchError(
            f"input and src tensors must have same dimensionality. ({input.dim()}) vs ({src.dim()})"
        )
    if input.dtype != src.dtype:
        raise createPoptorchError(f"input and src tensor must have same dtype. ({input.dtype} vs {src.dtype})")
    if not isRunningOnIpu():
        # poptorch's CPU kernel: a slice_scatter from the start's value (RegisterAtenOverloads.cpp:827-843).
        if start.is_floating_point() or start.dtype == torch.bool:
            raise createPoptorchError("Expected integer typed start tensor")
        first = int(start.reshape(-1)[0])
        return torch.slice_scatter(input, src, dim, first, first + size, 1)
    _check_dynamic_size(size)
    # As in dynamic_slice: any start compiles, wrapped into range. Written with operators poptorch lowers (PopART's
    # dynamicupdate has no ATen counterpart; index_copy has no lowering): each position takes the source's element
    # at its offset from the start when that offset is below `size`.
    length = input.shape[dim]
    offset = (torch.arange(length, device=input.device) - _dynamic_start(start)).remainder(length)
    shape = [1] * input.dim()
    shape[dim] = length
    inside = (offset < size).reshape(shape)
    taken = src.narrow(dim, 0, size).index_select(dim, offset.clamp(max=size - 1))
    return torch.where(inside, taken, input)


def for_loop(count: int, body: Callable[..., Any], inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run ``body`` ``count`` times on the device, each time on the previous outputs.

    Example:
        >>> for_loop(3, lambda x: x * 2, [torch.ones(1)])[0].tolist()
        [8.0]
    """
    if not isinstance(inputs, list) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ValueError("poptorch.for_loop expects input tensors (inputs) to be a list of tensors.")
    _refuse_in_training("poptorch.for_loop()")
    values = [t.clone() for t in inputs]
    for _ in range(count):
        outputs = body(*values)
        values = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    return values


def _refuse_in_training(name: str) -> None:
    # popart_compiler/source/Compiler.cpp:1487-1488, 1537-1538: device control flow in inference only.
    context = current_context()
    if context is not None and context.training:
        raise Error(f"{name} is only supported in inference.")


def cond(
    condition: torch.Tensor,
    then_body: Callable[..., Any],
    then_inps: list[torch.Tensor],
    else_body: Callable[..., Any],
    else_inps: list[torch.Tensor],
) -> list[torch.Tensor]:
    """An if/else decided by ``condition``'s value each time the program runs (poptorch 3.4 ``ops.py:201-276``).

    On the host the chosen body runs. On the (emulated) IPU both bodies run on copies of their inputs and each output
    is taken from the branch ``condition`` selects, so the choice follows the value of every micro-batch, as on the
    device, where the compiled program holds both branches.

    Example:
        >>> cond(torch.tensor(True), lambda x: x + 1, [torch.ones(1)], lambda x: x - 1, [torch.ones(1)])[0].tolist()
        [2.0]
    """
    if not isinstance(then_inps, list) or not isinstance(else_inps, list):
        raise ValueError(
            "poptorch.cond expects then_inps and else_inps tensors to be a list of tensors. (Object is not list)"
        )
    if not isRunningOnIpu():
        result = then_body(*then_inps) if condition else else_body(*else_inps)
        return [result] if isinstance(result, torch.Tensor) else [*result]
    _refuse_in_training("poptorch.cond()")
    chosen = condition.clone().bool()
    outputs_then = then_body(*[t.clone() if isinstance(t, torch.Tensor) else t for t in then_inps])
    if not isinstance(outputs_then, (list, tuple)):
        outputs_then = [outputs_then]
    outputs_else = else_body(*[t.clone() if isinstance(t, torch.Tensor) else t for t in else_inps])
    if not isinstance(outputs_else, (list, tuple)):
        outputs_else = [outputs_else]
    if len(outputs_then) != len(outputs_else):
        raise Error(
            "poptorch.cond: then_body and else_body must return the same number of outputs (then_body returned "
            f"{len(outputs_then)}, else_body {len(outputs_else)})."
        )
    return [torch.where(chosen, then, other) for then, other in strict_zip(outputs_then, outputs_else)]


def flattenTensorStructure(tensors: Any, canonical_structure: Any = None) -> list[torch.Tensor]:
    """The tensors in a nest of tuples, lists, dicts and custom types (their registered parsers), in order."""
    return [leaf for leaf in flatten(tensors)[0] if isinstance(leaf, torch.Tensor)]


def reconstructTensorStructure(structure: Any, values: Any, filter_fn: Callable[[Any], bool] = lambda t: True) -> Any:
    """``structure`` with its tensors replaced, in order, by ``values``."""
    leaves, spec = flatten(structure)
    replacements = iter(values)
    rebuilt = [next(replacements) if isinstance(leaf, torch.Tensor) and filter_fn(leaf) else leaf for leaf in leaves]
    return unflatten(rebuilt, spec)


def setLogLevel(level: str | int) -> None:
    """Set poptorch's log level (``"TRACE"``, ``"DEBUG"``, ``"INFO"``, ``"WARN"``, ``"ERR"``, ``"OFF"`` or 0-6)."""
    names = {"TRACE": 5, "DEBUG": 10, "INFO": 20, "WARN": 30, "ERR": 40, "OFF": 60}
    numbers = [5, 10, 20, 30, 40, 50, 60]
    if isinstance(level, str):
        if level not in names:
            raise ValueError(f"Unknown log level {level!r}: use one of {sorted(names)}.")
        logger.setLevel(names[level])
    else:
        logger.setLevel(numbers[level])


def poptorchAtExit() -> None:
    """Release poptorch's resources at interpreter exit (nothing to release here)."""


def module_repr(m: torch.nn.Module) -> str:
    """The module's ``repr``."""
    return repr(m)


def print(m: Any) -> None:
    """Print a module's :func:`module_repr`."""
    builtins.print(module_repr(m))
