"""A captured HPU graph as a program over host views of the HPU memory, replayed without any dispatch mode.

During a capture (see ``_recorder``) every ATen operation runs as usual: on the ``"hpu"`` device, with its device
rules, errors and memory accounting. What is kept for the replay is the same operation on *host views* of the same
memory (the C++ device's ``backing_alias``: a CPU tensor with the HPU tensor's sizes, strides and offset over its
memory, no copy), so a replay is a loop of ATen calls on plain host tensors that write the HPU tensors' memory. The
graph's semantics are those of the capture, exactly as with HPU (and CUDA) graphs:

* inputs are static: each step reads the backing tensors of the tensors the capture read (a view reads its base's
  memory), so new data must be copied into the captured inputs;
* outputs are static: the result of each operation that made new memory is copied into the backing tensor of the
  captured result, so every tensor the capture returned (and every intermediate that a later operation or a
  backward graph reads) is refreshed in place;
* operations that write in place or into ``out=`` run on the captured memory again;
* operations that only describe memory (views, ``detach``, aliases), only read values into Python (``.item()``),
  or only allocate (``empty``) have nothing to redo: their results already alias the captured memory, the Python
  control flow that used the value is frozen, and uninitialised memory needs no refresh;
* an operation whose output shape now differs (a dynamic operation) is a clear error.

The idea follows the SDK's ``HPUGraph`` (gaudi-pytorch-bridge ``backend/habana_device/HPUGraph.cpp``: the capture
records the launched recipes on the device tensors, ``replay`` launches them again on the same memory) and torch's
``CUDAGraph``, whose replay re-launches the captured kernels without Python.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _native

__all__ = ["BackingProgram", "DYNAMIC_OP_HINT"]

DYNAMIC_OP_HINT = (
    "Operations whose output shape depends on the data (dynamic ops such as nonzero or boolean indexing) cannot be "
    "replayed; run them outside the graph and wrap the static parts on either side in their own graphs (see 'HPU "
    "Graphs and Dynamicity in Models')."
)

# Profiler bookkeeping marks ranges in a trace; it is not device work.
_NOT_REPLAYED_NAMESPACES = frozenset({"profiler"})
# Only allocate: the memory's content is undefined until a later (recorded) operation writes it.
_ALLOCATION_ONLY = frozenset(
    {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided"}
)

# In-place operations that change their input's sizes, strides or storage: their effect on the captured tensors
# is already made, and the host views recorded after them have the new geometry.
METADATA_MUTATING = frozenset(
    {
        "aten::resize_",
        "aten::resize_as_",
        "aten::_resize_output_",
        "aten::set_",
        "aten::as_strided_",
        "aten::squeeze_",
        "aten::unsqueeze_",
        "aten::transpose_",
        "aten::t_",
        "aten::swapdims_",
        "aten::swapaxes_",
    }
)
# Operations about streams only: the emulator runs all work in issue order, so they have nothing to do.
STREAM_ONLY = frozenset({"aten::record_stream"})

_SKIP = 0  # nothing to redo at replay
_RUN = 1  # run; its results alias its inputs (in-place, out=) or are not tensors
_FRESH = 2  # run; the returns without alias information are new memory, copied into the captured results

_kinds: dict[Any, tuple[int, tuple[bool, ...], bool]] = {}


def _kind(func: torch._ops.OpOverload) -> tuple[int, tuple[bool, ...], bool]:
    """How an operation replays, which of its returns are new memory, whether it writes an input; cached."""
    known = _kinds.get(func)
    if known is not None:
        return known
    schema = func._schema
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    fresh = tuple(r.alias_info is None for r in schema.returns)
    if (
        func.namespace in _NOT_REPLAYED_NAMESPACES
        or schema.name in METADATA_MUTATING
        or schema.name in STREAM_ONLY
        or schema.name in _ALLOCATION_ONLY
    ):
        kind = _SKIP
    elif writes:
        kind = _FRESH if any(fresh) else _RUN
    elif not schema.returns:
        kind = _RUN  # no result, no write: a check such as _assert_async
    elif not any(fresh) or not any(_returns_tensors(r.type) for r in schema.returns):
        # Views and aliases share the captured memory; Python values (item(), sizes) froze the control flow.
        kind = _SKIP
    else:
        kind = _FRESH
    _kinds[func] = known = (kind, fresh, writes)
    return known


_draws_cache: dict[Any, bool] = {}


def _draws(func: torch._ops.OpOverload) -> bool:
    """Whether ``func`` takes a random generator (so draws random numbers); cached."""
    known = _draws_cache.get(func)
    if known is None:
        known = _draws_cache[func] = any("Generator" in str(a.type) for a in func._schema.arguments)
    return known


def _returns_tensors(kind: Any) -> bool:
    return "Tensor" in str(kind)


_HOST = torch.device("cpu")


def _backing(value: Any) -> Any:
    """``value`` with every ``"hpu"`` tensor replaced by a host view of its memory and ``"hpu"`` devices by the host."""
    cls = type(value)
    if isinstance(value, torch.Tensor):
        if value.device.type == "hpu" and not _traced(value):
            return _native.backing_alias(value)
        return value
    if cls is list or cls is tuple:
        return cls(_backing(v) for v in value)
    if cls is torch.device and value.type == "hpu":
        return _HOST
    return value


def _traced(value: torch.Tensor) -> bool:
    # Fake and functional tensors of a trace have no memory to view.
    return type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter)


def _storages(value: Any, into: set[int]) -> None:
    if isinstance(value, torch.Tensor):
        # Host views of one HPU storage are distinct storage objects over the same memory: compare addresses.
        into.add(value.untyped_storage().data_ptr())
    elif type(value) is list or type(value) is tuple:
        for v in value:
            _storages(v, into)


def _target(captured: Any, inputs: set[int]) -> Any:
    """The backing tensors a replay refreshes for one result: ``None`` where there is nothing to refresh."""
    if isinstance(captured, torch.Tensor):
        backing = _backing(captured)
        if type(backing) is not torch.Tensor or backing.untyped_storage().data_ptr() in inputs:
            return None  # a traced tensor, or an alias of an input (_unsafe_view, lift_fresh): no new memory
        return backing
    if type(captured) is list or type(captured) is tuple:
        targets = [_target(c, inputs) for c in captured]
        return targets if any(t is not None for t in targets) else None
    return None


class BackingProgram:
    """The operations of one capture over the backing tensors, ready to replay.

    Build it with :meth:`record` for each operation as it runs in the capture, then call :meth:`replay`.
    """

    def __init__(self) -> None:
        self._steps: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any, Any]] = []
        # The HPU tensors the capture used: a host view does not own the memory it views, so the program keeps the
        # HPU tensors (and their storages) alive as long as it can replay.
        self._keep: list[Any] = []

    def __len__(self) -> int:
        """The number of operations a replay runs."""
        return len(self._steps)

    def record(self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        """Keep the backing form of ``func(*args, **kwargs)``, which returned ``output`` in the capture."""
        kind, fresh, writes = _kind(func)
        if kind == _SKIP:
            return
        self._keep.append((args, kwargs, output))
        if _draws(func):
            # A random operation draws from the HPU's own generator: replayed on host views it would draw from the
            # host's. It replays on the HPU tensors themselves, and its fresh results are copied into the captured
            # memory as the others are.
            backing_args, backing_kwargs = args, dict(kwargs)
        else:
            backing_args = _backing(args)
            backing_kwargs = {k: _backing(v) for k, v in kwargs.items()}
        target = None
        if kind == _FRESH:
            inputs: set[int] = set()
            _storages(backing_args, inputs)
            _storages(tuple(backing_kwargs.values()), inputs)
            if len(fresh) == 1:
                target = _target(output, inputs)
            else:
                target = [_target(o, inputs) if new else None for o, new in zip(output, fresh, strict=True)]
                if all(t is None for t in target):
                    target = None
            if target is None and not writes:
                return  # a pure function whose results all alias its inputs: nothing to redo
        self._steps.append((func._op, backing_args, backing_kwargs, target, func))

    def replay(self) -> None:
        """Run the operations again on the captured memory, in capture order.

        Raises:
            RuntimeError: When an operation now produces a result of another shape (a dynamic operation).
        """
        tensor = torch.Tensor
        for op, args, kwargs, target, func in self._steps:
            result = op(*args, **kwargs)
            if target is None:
                continue
            if type(target) is tensor:
                if result.shape != target.shape:
                    raise _dynamic(func, result, target)
                target.copy_(result)
            else:
                _refresh(target, result, func)


def _refresh(target: Any, result: Any, func: Any) -> None:
    if target is None:
        return
    if type(target) is torch.Tensor:
        if result.shape != target.shape:
            raise _dynamic(func, result, target)
        target.copy_(result)
        return
    for old, new in zip(target, result, strict=False):
        _refresh(old, new, func)


def _dynamic(func: Any, result: torch.Tensor, target: torch.Tensor) -> RuntimeError:
    return RuntimeError(
        f"HPU graph replay: {func} produced shape {tuple(result.shape)}, but the captured graph holds "
        f"{tuple(target.shape)}. {DYNAMIC_OP_HINT}"
    )
