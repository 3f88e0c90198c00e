"""What the emulated device sees while it runs one micro-batch.

poptorch traces the model into a graph; the emulator runs the model eagerly under a ``TorchFunctionMode`` that
reproduces what the graph compiler observes: which IPU each operation and parameter lands on (from the block
annotations), which values are losses (every torch loss function and ``identity_loss``), and poptorch's default
half/float casting (an operation that mixes float16 and float32 inputs runs in float32).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch
import torch.nn.functional as F
from torch.fx.experimental import proxy_tensor
from torch.overrides import TorchFunctionMode

from .errors import Error
from .lowering import decomposed_here
from .narrowing import adapt_call

__all__ = ["DeviceContext", "current_context", "final_loss", "running_on", "running_outside_device"]

# The losses poptorch 3.4 lowers and marks as losses (popart_canonicalization/LossOps.cpp:636-652,
# AtenHandlers.gen.cpp, RegisterOptionalAtenOps.cpp.inc): huber_loss, multi_margin_loss, multilabel_margin_loss and
# gaussian_nll_loss have no lowering rule (poptorch_3_4_ops.json), so they are not losses on an IPU.
_LOSS_FUNCTIONS = frozenset(
    getattr(F, name)
    for name in (
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "cosine_embedding_loss",
        "cross_entropy",
        "ctc_loss",
        "hinge_embedding_loss",
        "kl_div",
        "l1_loss",
        "margin_ranking_loss",
        "mse_loss",
        "multilabel_soft_margin_loss",
        "nll_loss",
        "poisson_nll_loss",
        "smooth_l1_loss",
        "soft_margin_loss",
        "triplet_margin_loss",
    )
    if hasattr(F, name)
)
# Calls that convert or write in place: casting their inputs would change what they mean.
_NO_CAST_NAMES = frozenset({"to", "type", "type_as", "copy_", "__setitem__", "__get__", "__set__", "set_", "data"})
# Calls that only read metadata: not operators of the compiled graph.
_NOT_OPERATORS = frozenset({"__get__", "__set__", "dim", "size", "numel", "__len__", "__format__", "__repr__", "data"})

_current: ContextVar[DeviceContext | None] = ContextVar("poptorch_emulator_context", default=None)


class DeviceContext:
    """Observations of one execution of the model on the emulated device.

    Attributes:
        current_ipu: IPU of the block being executed.
        blocks: ``(user_id, ipu)`` of every block started, in execution order.
        block_stages: The stage of each of those blocks.
        operators: Operator name counts per IPU (only when ``record`` is on).
        parameters: Names of the parameters used per IPU (only when ``record`` is on).
        losses: Every loss value computed.
    """

    def __init__(self, parameter_names: dict[int, str], record: bool, stages: Any = None) -> None:
        self._parameter_names = parameter_names
        self._record = record
        # The execution strategy's stage manager (execution.StageManager): which stage and IPU a block gets.
        self._stages = stages
        # poptorch's active IPU: 0 until a block starts, -1 once a `with Block` ended and until the next block
        # starts (popart_compiler CompilerImpl.hpp:236-239, Compiler.cpp:1251).
        self.current_ipu = 0
        self.current_user_id: str | None = None
        # Pipeline stages are counted as poptorch counts them: one more at every change of IPU, from IPU 0, where
        # the operations before the first block run (Compiler.cpp:1286-1296, CompilerImpl.cpp:478-494).
        self.last_ipu_used = 0
        self.ipu_switches = 0
        # The first in-place write to a weight or buffer seen (its name), for the broadcast-buffers rule.
        self.state_names: dict[int, str] = {}
        self.inplace_writes: list[str] = []
        self.blocks: list[tuple[str | None, int]] = []
        self.block_stages: list[int] = []
        self.operators: dict[int, Counter[str]] = {}
        self.parameters: dict[int, set[str]] = {}
        self.losses: list[torch.Tensor] = []
        # Operators poptorch would have recorded for torch functions this torch decomposes before dispatch.
        self.decomposed_calls: list[str] = []
        # Whether a training executor compiles the model (for_loop and cond are for inference only).
        self.training = False

    def start_block(self, user_id: str | None, ipu_id: int | None) -> None:
        """Everything executed from now on belongs to this block, until the next block starts.

        Raises:
            AssertionError: As poptorch 3.4 asserts, for a block its execution strategy cannot place (see
                :mod:`.execution`).
        """
        if ipu_id is not None and not isinstance(ipu_id, int):
            # poptorch passes the IPU to its operator begin_ipu_block(int stage_id, int phase_id, int ipu_id)
            # (_options_impl.py:251, RegisterAtenOverloads.cpp:888), whose schema refuses anything else.
            raise RuntimeError(
                "poptorch::begin_ipu_block() Expected a value of type 'int' for argument 'ipu_id' but instead found "
                f"type '{type(ipu_id).__name__}'."
            )
        if ipu_id is not None and ipu_id < 0:
            raise TypeError(f"ipu_id must be a non-negative int or None, got {ipu_id!r}.")
        if self._stages is None:
            from .execution import PipelinedExecution

            self._stages = PipelinedExecution().stage_manager()
        name, stage, ipu = self._stages.begin(user_id, ipu_id)
        if ipu != self.last_ipu_used:
            self.ipu_switches += 1
        self.last_ipu_used = ipu
        self.current_ipu = ipu
        self.current_user_id = name
        self.blocks.append((name, ipu))
        self.block_stages.append(stage)

    def reset_auto_id(self) -> None:
        """``Block.useAutoId()``: blocks without ``user_id`` are numbered from ``"0"`` again."""
        if self._stages is not None:
            self._stages.reset_auto_id()

    def end_block(self) -> None:
        """The enclosing block ended (``Block.__exit__``): until the next block starts, no operation may run.

        poptorch 3.4 clears the active IPU (``LowerToPopart.cpp:689-690``, ``Compiler.cpp:1251``) and refuses every
        later operation with "No active Block, all the ops must belong to a Block" (``CompilerImpl.cpp:424-427``;
        ``tests/pipelining_test.py::test_missing_block``).
        """
        self.current_user_id = None
        self.current_ipu = -1

    @property
    def forward_stages(self) -> int:
        """The forward pipeline stages as poptorch counts them: one plus the changes of IPU."""
        return self.ipu_switches + 1

    def add_loss(self, value: torch.Tensor) -> None:
        """Register ``value`` as a loss of the graph."""
        self.losses.append(value)

    def record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Attribute one operator call (and the parameters it reads) to the current IPU."""
        if not self._record or name in _NOT_OPERATORS:
            return
        if self.current_ipu < 0:
            raise Error("No active Block, all the ops must belong to a Block")
        self.operators.setdefault(self.current_ipu, Counter())[name] += 1
        used = self.parameters.setdefault(self.current_ipu, set())
        for value in (*args, *kwargs.values()):
            param = self._parameter_names.get(id(value))
            if param is not None:
                used.add(param)

    @property
    def used_ipus(self) -> int:
        """How many IPUs one replica of the model spans (``max ipu_id + 1``)."""
        return max((ipu for _, ipu in self.blocks), default=0) + 1

    def check_inplace(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Note an in-place write to a weight or buffer of the model.

        ``add_``, ``+=``, ``copy_``, ``out=`` and a training BatchNorm's running statistics write in place.
        """
        if not self.state_names:
            return
        targets: list[Any] = []
        if (name.endswith("_") and not name.startswith("_")) or name in _INPLACE_DUNDERS:
            targets.append(args[0] if args else None)
        if "out" in kwargs:
            targets.append(kwargs["out"])
        if name == "batch_norm" and _positional(args, 5, kwargs.get("training", False)):
            # Training BatchNorm updates its running statistics in place.
            targets.append(_positional(args, 1, kwargs.get("running_mean")))
            targets.append(_positional(args, 2, kwargs.get("running_var")))
        for target in targets:
            written = self.state_names.get(id(target)) if isinstance(target, torch.Tensor) else None
            if written is not None:
                self.inplace_writes.append(written)


_INPLACE_DUNDERS = frozenset(
    {
        "__iadd__",
        "__isub__",
        "__imul__",
        "__itruediv__",
        "__ifloordiv__",
        "__imod__",
        "__ipow__",
        "__iand__",
        "__ior__",
        "__ixor__",
        "__ilshift__",
        "__irshift__",
        "__setitem__",
    }
)


# Calls whose index may hold slice bounds, which torch reads as Python ints.
_INDEXING = frozenset({"__getitem__", "__setitem__"})


def _host_value(tensor: torch.Tensor) -> Any:
    """``tensor``'s value when it is a host constant of the trace, else ``tensor`` itself.

    poptorch 3.4 runs tensors that are not on the IPU (a ``torch.tensor([1])`` the model holds, and arithmetic on it)
    eagerly on the host, so ``x[start:start + 2]`` with such a ``start`` is an ordinary slice. The emulator's trace
    records that arithmetic too; a value whose recorded history reaches no graph input is such a host value. One that
    does is on the IPU: reading it stays refused, as poptorch refuses it ("aten::item is only supported in eager
    mode"; its user guide: use ``poptorch.dynamic_slice``).
    """
    if tensor.numel() != 1 or tensor.is_floating_point() or tensor.dtype == torch.bool:
        return tensor
    mode = proxy_tensor.get_innermost_proxy_mode()
    if mode is not None and proxy_tensor.has_proxy_slot(tensor, mode.tracer):
        node = proxy_tensor.get_proxy_slot(tensor, mode.tracer).proxy.node
        seen: set[torch.fx.Node] = set()
        stack = [node]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            if current.op == "placeholder":
                return tensor
            seen.add(current)
            stack.extend(current.all_input_nodes)
    with proxy_tensor.disable_proxy_modes_tracing():
        return int(tensor.reshape(()).item())


def _host_bounds(index: Any) -> Any:
    # A tensor used as an index (not as a slice bound) is advanced indexing, an operator of the graph: kept.
    if isinstance(index, slice):
        parts = [_host_value(p) if isinstance(p, torch.Tensor) else p for p in (index.start, index.stop, index.step)]
        return slice(*parts)
    if isinstance(index, tuple):
        return tuple(_host_bounds(item) if isinstance(item, slice) else item for item in index)
    return index


def _positional(args: tuple[Any, ...], index: int, default: Any = None) -> Any:
    return args[index] if len(args) > index else default


def current_context() -> DeviceContext | None:
    """The context of the micro-batch being executed, or ``None`` outside the device (annotations are no-ops)."""
    return _current.get()


def _tensors(values: Any) -> Iterator[torch.Tensor]:
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensors(value)


def _upcast(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype == torch.float16:
        return value.float()
    if isinstance(value, (list, tuple)) and any(isinstance(item, torch.Tensor) for item in value):
        return type(value)(_upcast(item) for item in value)
    return value


class _DeviceMode(TorchFunctionMode):
    def __init__(self, context: DeviceContext) -> None:
        super().__init__()
        self._context = context

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        in_place = name.endswith("_") and not name.startswith("_")
        if not in_place and name not in _NO_CAST_NAMES:
            dtypes = {t.dtype for t in _tensors((*args, *kwargs.values())) if t.is_floating_point()}
            if torch.float16 in dtypes and torch.float32 in dtypes:
                args = tuple(_upcast(arg) for arg in args)
                kwargs = {key: _upcast(value) for key, value in kwargs.items()}
        self._context.check_inplace(name, args, kwargs)
        if name in _INDEXING and len(args) > 1:
            args = (args[0], _host_bounds(args[1]), *args[2:])
        elif name == "narrow" and len(args) > 2 and isinstance(args[2], torch.Tensor):
            args = (*args[:2], _host_value(args[2]), *args[3:])
        args, kwargs = adapt_call(name, args, kwargs)
        replaced = decomposed_here(name)
        if replaced is not None:
            self._context.decomposed_calls.append(replaced)
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            self._context.record(name, args, kwargs)
            if func in _LOSS_FUNCTIONS:
                self._context.add_loss(out)
        return out


@contextlib.contextmanager
def running_on(context: DeviceContext) -> Iterator[DeviceContext]:
    """Run the enclosed code as the device would: annotations active, losses and operators observed."""
    token = _current.set(context)
    try:
        with _DeviceMode(context):
            yield context
    finally:
        _current.reset(token)


@contextlib.contextmanager
def running_outside_device() -> Iterator[None]:
    """Run the enclosed code as the host does (a ``poptorch.CPU`` function): annotations and losses not observed."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


def _feeds(loss: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether ``loss`` is an input of ``other`` (so ``other`` subsumes it)."""
    target = loss.grad_fn
    if target is None or other.grad_fn is None:
        return False
    seen: set[int] = set()
    stack: list[Any] = [other.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        if node is target:
            return True
        seen.add(id(node))
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return False


def final_loss(losses: list[torch.Tensor]) -> torch.Tensor:
    """The one loss that is not an input of another loss.

    Raises:
        Error: With poptorch's words when there is no loss or several independent ones.
    """
    unique = list({id(loss): loss for loss in losses}.values())
    if not unique:
        raise Error(
            "Couldn't find a loss in graph! A training model must compute its loss with a torch loss function "
            "(e.g. torch.nn.functional.cross_entropy) or wrap it in poptorch.identity_loss(loss, reduction='mean')."
        )
    independent = [loss for loss in unique if not any(_feeds(loss, other) for other in unique if other is not loss)]
    if len(independent) != 1:
        raise Error(
            "Multiple independent losses found in graph. Graph must have one final loss. Wrap final graph loss in "
            "poptorch.identity_loss."
        )
    return independent[0]
