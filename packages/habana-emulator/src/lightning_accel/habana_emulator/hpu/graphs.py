"""Emulation of the SDK's HPU Graphs API (``habana_frameworks.torch.hpu.graphs``), name for name.

The module has the public names of gaudi-pytorch-bridge bcc5172 (the SDK 1.24 period) ``python_packages/
habana_frameworks/torch/hpu/graphs.py`` with their parameters (checked by ``tests/test_sdk_api_table.py``) and no
others:

* the graph APIs, emulated: :class:`HPUGraph` and the :class:`graph` context manager (``_hpu_graph``),
  :func:`make_graphed_callables` (``_graphed_callables``), :class:`ModuleCacher`, :func:`wrap_in_hpu_graph` and
  :func:`wrap_in_hpu_graph_func` (``_graph_cache``), :func:`is_current_stream_capturing`, :func:`log_stats`;
* the SDK's small helpers over tensors and nested inputs, defined here with the SDK's behaviour:
  :func:`stringify`, :func:`input_hash`, :func:`copy_to`, :func:`get_user_input_tensor_list`,
  :func:`extract_tensors`, :func:`is_any_cpu_float_bfloat_0d_tensors`, :func:`get_tensor_info`; ``htcore``, the
  SDK's ``core`` module, and ``is_lazy`` (``utils.internal.is_lazy``), which the SDK's module imports;
* the internals of the SDK's own graph caches, which the emulator builds differently (its caches key graphs by the
  same ``input_hash`` but keep their own entries): ``CachedParams``, ``GraphModel``, ``TensorPacker``,
  ``wrapped_hpugraph_forward``, and ``hpu_graph_print`` (the SDK's C++ graph log). They refuse by name, with the
  reason, when used (``.._not_emulated``).

``hpu`` exports all of them in both modes, as the SDK's unconditional ``from .graphs import *`` does from 1.24 on;
a graph is created in lazy mode only (``HPUGraph()`` and ``graph(...)`` raise ``RuntimeError`` in eager mode,
``hpu/graphs.py:49-51``, ``:188-189``), so the wrappers that create graphs fail at their first capture there.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable
from typing import Any

import torch

from .. import _not_emulated
from .. import core as htcore
from ..utils.internal import is_lazy
from ._graph_cache import ModuleCacher, log_stats, wrap_in_hpu_graph, wrap_in_hpu_graph_func
from ._graphed_callables import make_graphed_callables
from ._hpu_graph import HPUGraph, graph, is_current_stream_capturing

__all__: list[str] = [
    "HPUGraph",
    "ModuleCacher",
    "copy_to",
    "extract_tensors",
    "get_tensor_info",
    "get_user_input_tensor_list",
    "graph",
    "htcore",
    "input_hash",
    "is_any_cpu_float_bfloat_0d_tensors",
    "is_current_stream_capturing",
    "is_lazy",
    "log_stats",
    "make_graphed_callables",
    "stringify",
    "wrap_in_hpu_graph",
    "wrap_in_hpu_graph_func",
]

_SDK = "habana_frameworks.torch.hpu.graphs"


def stringify(*args: Any) -> str:
    """The arguments as one string, each preceded by a space (the SDK builds its graph log lines with it).

    Example:
        >>> stringify("warmups", 2)
        ' warmups 2'
    """
    return "".join(f" {item}" for item in args)


def _autocast_enabled() -> bool:
    # The SDK asks its C++ autocast switch for the HPU (torch.hpu.is_autocast_hpu_enabled); on stock torch it is
    # torch's autocast state of the "hpu" device type.
    return torch.is_autocast_enabled("hpu")


def _view_hash(tensor: torch.Tensor) -> int:
    # The SDK hashes the chain of lazy view operations that made the tensor (_hpu_C.get_view_hash, bridge 1.19.0
    # hpu/csrc/bindings.cpp:263-290), 0 for a tensor that is no view. Here: the view's layout over its base.
    if not tensor._is_view() or tensor._base is None:
        return 0
    return hash((tuple(tensor._base.shape), tuple(tensor.stride()), tensor.storage_offset()))


def input_hash(obj: Any) -> int:
    """A hash of a call's inputs: tensors by dtype, shape and view layout (not values), other values by ``hash``.

    As the SDK's (bridge bcc5172 ``hpu/graphs.py``, ``input_hash``): dicts hash their items, lists and tuples their
    elements, a ``collections.UserDict`` (transformers' ``BatchEncoding``) the elements of each value, a dataclass
    (a model output class) its fields by name, and every list, tuple, tensor and plain value includes whether HPU
    autocast is on, so the same inputs under autocast hash differently. From the 1.24 period on the dtype is part of
    a tensor's hash (1.19 hashed its shape and view chain only), so a call that differs only in dtype is another key.

    Args:
        obj: A tensor, a value, or a dict, list, tuple, ``UserDict`` or dataclass of them (nested).

    Raises:
        TypeError: When a value in ``obj`` is not hashable (as ``hash`` does), or a ``UserDict`` value is not
            iterable (the SDK iterates each value).

    Example:
        >>> input_hash((torch.zeros(2), 1)) == input_hash((torch.ones(2), 1))
        True
        >>> input_hash(torch.zeros(2)) == input_hash(torch.zeros(2, dtype=torch.float64))
        False
    """
    if isinstance(obj, dict):
        return input_hash(tuple(obj.items()))
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return hash((tuple(input_hash(item) for item in obj), _autocast_enabled()))
    if isinstance(obj, torch.Tensor):
        return hash((obj.dtype, tuple(obj.shape), _view_hash(obj), _autocast_enabled()))
    if isinstance(obj, collections.UserDict):
        return hash(
            tuple((key, tuple(input_hash(item) for item in _iterated(value, key))) for key, value in obj.items())
        )
    if dataclasses.is_dataclass(obj):
        return hash(tuple((field.name, input_hash(getattr(obj, field.name))) for field in dataclasses.fields(obj)))
    return hash((obj, _autocast_enabled()))


def _iterated(value: Any, key: Any) -> Iterable[Any]:
    # The SDK iterates each value of a UserDict; Python's own "object is not iterable" would not say where.
    try:
        return iter(value)
    except TypeError as error:
        raise TypeError(
            f"input_hash(obj=...): the UserDict value at key {key!r} ({type(value).__name__}) cannot be iterated, "
            "and the SDK hashes the elements of each UserDict value. Pass a plain dict, or hold the value in a "
            "list or a tensor with at least one dimension."
        ) from error


def copy_to(dst: Any, src: Any) -> None:
    """Copy the tensors of ``src`` into the tensors at the same places in ``dst`` (nested dicts, lists, tuples).

    Values other than tensors are left alone; a dataclass is copied field by field (from the 1.24 period on). The
    SDK uses it to refill a graph's captured inputs before a replay.
    Unlike the SDK, which asserts equal types and then pairs elements with ``zip``, a mismatch of structure is an
    error here rather than a partial copy.

    Args:
        dst: The tensors to write into (a tensor, or a dict, list, tuple or dataclass of them).
        src: The same structure with the new tensors.

    Raises:
        TypeError: When ``dst`` and ``src`` have different types at some place.
        ValueError: When two dicts have different keys, or two sequences different lengths.

    Example:
        >>> static = {"x": torch.zeros(2)}
        >>> copy_to(static, {"x": torch.ones(2)}); static["x"]
        tensor([1., 1.])
    """
    if type(dst) is not type(src):
        raise TypeError(
            f"copy_to(dst=..., src=...) needs the same structure in both: dst is a {type(dst).__name__}, src a "
            f"{type(src).__name__}. Pass src shaped like the inputs the graph captured."
        )
    if isinstance(dst, dict):
        if list(dst) != list(src):
            raise ValueError(
                f"copy_to(dst=..., src=...) needs dicts with the same keys in the same order: dst has {list(dst)}, "
                f"src {list(src)}."
            )
        for key, value in dst.items():
            copy_to(value, src[key])
    elif isinstance(dst, (list, tuple)) and not isinstance(dst, torch.Size):
        if len(dst) != len(src):
            raise ValueError(
                f"copy_to(dst=..., src=...) needs sequences of the same length: dst has {len(dst)}, src {len(src)}."
            )
        for target, source in zip(dst, src, strict=True):
            copy_to(target, source)
    elif dataclasses.is_dataclass(dst):
        for field in dataclasses.fields(dst):
            copy_to(getattr(dst, field.name), getattr(src, field.name))
    elif isinstance(dst, torch.Tensor):
        dst.copy_(src, non_blocking=True)


def get_user_input_tensor_list(inputs: Any, tlist: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """``tlist`` followed by the tensors of ``inputs``, in order (dict items, list, tuple and dataclass elements).

    Args:
        inputs: A tensor, or a dict, list, tuple or dataclass holding tensors (other values are skipped).
        tlist: The tensors found so far.

    Example:
        >>> len(get_user_input_tensor_list(((torch.zeros(1),), {"y": torch.ones(1), "n": 3}), ()))
        2
    """
    if isinstance(inputs, dict):
        for item in inputs.items():
            tlist = get_user_input_tensor_list(item, tlist)
    elif isinstance(inputs, (list, tuple)):
        for item in inputs:
            tlist = get_user_input_tensor_list(item, tlist)
    elif dataclasses.is_dataclass(inputs):
        for field in dataclasses.fields(inputs):
            tlist = get_user_input_tensor_list(getattr(inputs, field.name), tlist)
    elif isinstance(inputs, torch.Tensor):
        tlist = (*tlist, inputs)
    return tlist


def extract_tensors(data: Any) -> list[torch.Tensor]:
    """Every tensor held in ``data``: in lists, tuples, dict values, object attributes and dataclass fields, nested.

    Dataclasses with ``slots=True`` (no ``__dict__``) are read field by field, as the SDK does from the 1.24 period on.

    Args:
        data: A tensor, a container, or an object whose attributes hold tensors (a model output class).

    Example:
        >>> len(extract_tensors({"logits": torch.zeros(1), "extra": [torch.ones(1), "text"]}))
        2
    """
    found: list[torch.Tensor] = []
    _collect_tensors(data, found, set())
    return found


def _collect_tensors(data: Any, found: list[torch.Tensor], seen: set[int]) -> None:
    if isinstance(data, torch.Tensor):
        found.append(data)
    elif isinstance(data, (list, tuple)):
        for item in data:
            _collect_tensors(item, found, seen)
    elif isinstance(data, dict):
        for value in data.values():
            _collect_tensors(value, found, seen)
    elif hasattr(data, "__dict__") and id(data) not in seen:
        # An object graph may refer back to itself (a module's parent); the SDK's recursion would not end there.
        seen.add(id(data))
        for value in vars(data).values():
            _collect_tensors(value, found, seen)
    elif dataclasses.is_dataclass(data) and id(data) not in seen:
        seen.add(id(data))
        for field in dataclasses.fields(data):
            _collect_tensors(getattr(data, field.name), found, seen)


def is_any_cpu_float_bfloat_0d_tensors(tensors: Iterable[Any]) -> bool:
    """Whether ``tensors`` holds a 0-dimensional float32 or bfloat16 tensor on the CPU (a scalar such as a scale).

    The SDK's ``wrap_in_hpu_graph`` asks it of a call's input tensors: such a tensor is copied to the device at each
    replay (``replay_with_inputs``), so a graph follows its new value. The emulated graphs read it at every replay
    too (it is one of the graph's inputs, refilled by ``copy_to``).

    Args:
        tensors: Any values; those that are not tensors are skipped.

    Example:
        >>> is_any_cpu_float_bfloat_0d_tensors([torch.ones(2), torch.tensor(0.5)])
        True
    """
    return any(
        isinstance(t, torch.Tensor)
        and t.device.type == "cpu"
        and t.dtype in (torch.float32, torch.bfloat16)
        and t.dim() == 0
        for t in tensors
    )


def get_tensor_info(tensor: torch.Tensor) -> dict[str, Any]:
    """The ``shape``, ``dtype`` and ``device`` of ``tensor``, as a dict.

    Example:
        >>> get_tensor_info(torch.zeros(2, 3))["shape"]
        torch.Size([2, 3])
    """
    return {"shape": tensor.shape, "dtype": tensor.dtype, "device": tensor.device}


_not_emulated.provide(globals(), _SDK)
