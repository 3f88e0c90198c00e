"""The compiled program: a model's Python traced once into an ATen graph, then executed without that Python.

poptorch traces the model's Python once per compiled executable (``PoplarExecutor._compile`` calls the model on
``ipu`` tensors once, poptorch 3.4 ``python/_poplar_executor.py:854``) and every later host call runs the compiled
program (``poptorch_core.execute``, ``_poplar_executor.py:1271``). The emulator does the same with
``torch.fx.experimental.proxy_tensor.make_fx``: the model runs once on real tensors while every ATen operation it
dispatches is recorded; later micro-batches run the recorded graph. Python side effects (prints, counters, branches
on Python values, ``self.log`` calls) therefore happen once, at compilation, as on an IPU; tensor results (losses,
logged values) are outputs of the graph and change with every micro-batch.

The weights, buffers and inputs are the graph's inputs, so one graph serves every micro-batch, replica and
device iteration; in-place updates of buffers (BatchNorm's running statistics) are operations of the graph and
update the buffers passed in. Random operations (dropout) are operations of the graph too and draw new numbers on
every execution. Autograd records the executed ATen operations, so a training executor differentiates the graph.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lightning_accel.core.pycompat import strict_zip

from .errors import Error
from .lowering import check_traced_graph
from .narrowing import Narrowing, narrow
from .structures import flatten

__all__ = ["ITEM_ERR", "Program", "trace"]

ITEM_ERR = (
    "aten::item is only supported in eager mode, but was intercepted in a static graph. This means an IPU to CPU copy "
    "was triggered before the end of the graph, for example by calling tensor.item(). Please ensure that any such "
    "copies are removed."
)


class Program:
    """A traced model: ``run_leaves(state, inputs)`` returns its output's leaves and the loss (when training).

    ``unflatten(leaves, output_spec)`` rebuilds the output's structure.

    Attributes:
        graph: The recorded ``torch.fx.GraphModule``.
        constants: The non-tensor leaves of the output, fixed at compilation.
    """

    def __init__(
        self,
        graph: torch.fx.GraphModule,
        output_spec: Any,
        tensor_positions: list[int],
        constants: dict[int, Any],
        with_loss: bool,
    ) -> None:
        # Positional leaves in, a list out: the pytree (un)flattening make_fx generates costs more than a small
        # model's operators, and the leaves are flat already.
        graph.graph._codegen = torch.fx.graph.CodeGen()
        _call_operators_directly(graph.graph)
        graph.recompile()
        self.graph = graph
        self._forward = graph.forward
        self._output_spec = output_spec
        self._tensor_positions = tensor_positions
        self.constants = constants
        self._with_loss = with_loss
        self._leaf_count = len(tensor_positions) + len(constants)

    @property
    def output_spec(self) -> Any:
        """The structure of the model's output, to rebuild it from :meth:`run_leaves`' leaves with ``unflatten``."""
        return self._output_spec

    def run_leaves(
        self, state: list[torch.Tensor], inputs: list[torch.Tensor]
    ) -> tuple[list[Any], torch.Tensor | None]:
        """Execute the graph on ``state`` (weights and buffers) and the micro-batch's tensor ``inputs``.

        The output comes as its leaves in order: a host call rebuilds the structure once, from all micro-batches.
        """
        results = self._forward(*state, *inputs)
        leaves: list[Any] = [None] * self._leaf_count
        # The graph returns one tensor per position, in order (checked when it was traced), then the loss.
        for position, value in zip(self._tensor_positions, results):
            leaves[position] = value
        for position, value in self.constants.items():
            leaves[position] = value
        return leaves, results[-1] if self._with_loss else None


def _call_operators_directly(graph: torch.fx.Graph) -> None:
    """Make the generated code call each ATen operator's C++ entry point instead of its Python ``OpOverload``.

    ``OpOverload.__call__`` is a Python frame that only forwards to ``OpOverload._op``; with a dozen operators per
    micro-batch, those frames were a measurable part of a small model's step (benchmarks/bench_ipu_device_iterations).
    ``functools.partial`` is called from C; its name is what the generated code calls it.
    """
    for node in graph.nodes:
        target = node.target
        if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
            direct = functools.partial(target._op)
            direct.__name__ = str(target).replace(".", "_")  # type: ignore[attr-defined]
            direct.__module__ = __name__  # not torch's: the code names it by this global, not by a torch path
            node.target = direct


def trace(
    call: Callable[[list[torch.Tensor], list[Any]], tuple[Any, torch.Tensor | None]],
    state: list[torch.Tensor],
    leaves: list[Any],
    decomposed_calls: list[str] | None = None,
) -> Program:
    """Trace ``call(state, leaves)`` once; tensor leaves become graph inputs, other leaves constants.

    ``call`` returns the model's output and the loss (``None`` for inference). The traced graph is then checked as
    poptorch 3.4 checks its own (:mod:`.lowering`); ``decomposed_calls`` (filled while ``call`` runs) are operators
    poptorch would have recorded for torch functions this torch decomposes.

    Raises:
        Error: When the model's Python reads a value out of a device tensor (``.item()``, ``if tensor:``), with
            poptorch's text; a compiled graph cannot do it. When the graph holds an operator poptorch cannot lower
            or whose output shape depends on the values (see :func:`.lowering.check_traced_graph`).
        torch._subclasses.fake_tensor.DynamicOutputShapeException: For indexing with a boolean mask.
    """
    tensor_slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    fixed = {i: leaf for i, leaf in enumerate(leaves) if not isinstance(leaf, torch.Tensor)}
    shape: dict[str, Any] = {}

    def traced(state_: list[torch.Tensor], *tensors: torch.Tensor) -> list[torch.Tensor]:
        full: list[Any] = [None] * len(leaves)
        for slot, tensor in strict_zip(tensor_slots, tensors):
            full[slot] = narrow(tensor)
        for slot, value in fixed.items():
            full[slot] = value
        with Narrowing():
            output, loss = call(state_, full)
        out_leaves, spec = flatten(output)
        shape["spec"] = spec
        shape["tensors"] = [i for i, leaf in enumerate(out_leaves) if isinstance(leaf, torch.Tensor)]
        shape["constants"] = {i: leaf for i, leaf in enumerate(out_leaves) if not isinstance(leaf, torch.Tensor)}
        results = [leaf for leaf in out_leaves if isinstance(leaf, torch.Tensor)]
        shape["loss"] = loss is not None
        if loss is not None:
            results.append(loss)
        return results

    # poptorch turns torch.distributions' argument checks off while it traces: they read a value out of an IPU tensor
    # (python/_poplar_executor.py:83-92).
    validate_args = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        graph = make_fx(traced)(state, *(leaves[i] for i in tensor_slots))
    except RuntimeError as err:
        if "_local_scalar_dense" in str(err) or "value out of a tracing tensor" in str(err):
            # poptorch's aten::item (poptorch/source/dispatch_tracer/RegisterAtenOverloads.cpp:508-512), which
            # bool(tensor), int(tensor) and `if tensor:` call too.
            raise Error(ITEM_ERR) from err
        raise
    finally:
        torch.distributions.Distribution.set_default_validate_args(validate_args)
    check_traced_graph(graph.graph, decomposed_calls or [])
    return Program(graph, shape["spec"], shape["tensors"], shape["constants"], with_loss=shape["loss"])
