"""Which traced ATen operators poptorch 3.4 can lower to PopART, and its refusals of the others.

poptorch records every operator dispatched to the IPU as an ``aten::`` node, rewrites the nodes it has a
canonicalisation handler for, and fails the compile listing every ``aten::`` node left
(``poptorch/source/ErrorOnUnsupportedAten.cpp``, after dead-code elimination, ``LowerToPopartFactories.cpp:37-99``).
Before that, while tracing, the meta kernels it uses to infer output shapes refuse the operators whose output shape
depends on the values (``dispatch_tracer/RegisterMetaOps.cpp.inc``: ``nonzero``, ``bincount`` without
``minlength``; torch's meta kernel of ``aten::index`` refuses a boolean mask with ``DynamicOutputShapeException``,
``tests/index_ops_test.py::test_index_bool_mask_failure``).

The handlers, the passes' renames and the texts come from ``poptorch_3_4_ops.json``, generated from poptorch's
sources by ``tests/data/generate_poptorch_ops.py``. The emulator traces with the torch it runs on, not poptorch's
torch 2.0.1, so the recorded operators can differ from what poptorch's dispatcher saw:

- An operator with a ``CompositeExplicitAutograd`` kernel that poptorch does not intercept reaches the IPU as the
  operators its kernel calls (the IPU fallback ranks below composite kernels); the emulator records the composite
  itself and accepts it, since it cannot see what it decomposes into.
- ``_TORCH_RENAMES`` maps the names later torch records for operators poptorch lowers under their 2.0 name.
- An operator torch tags ``dynamic_output_shape`` (``unique``, ``unique_consecutive``, ``masked_select``,
  ``repeat_interleave`` with a tensor of counts) has no meta kernel in torch 2.0.1, and poptorch refuses it while
  tracing ("Type inference failed for ...", ``TypeInferenceHandler.cpp:30-37``), even when only its shape is read.
- ``_DECOMPOSED_HERE``: torch functions that newer torch decomposes before the tracer sees them, while torch 2.0.1
  dispatched an operator poptorch cannot lower (``repeat_interleave`` with an int count called
  ``aten::repeat_interleave.Tensor``, ``aten/src/ATen/native/Repeat.cpp`` in torch 2.0.1).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import torch

from .errors import Error

__all__ = ["check_traced_graph", "decomposed_here", "lowers", "message", "table"]

_TABLE = Path(__file__).with_name("poptorch_3_4_ops.json")
# Names the tracer of a later torch records for an operator poptorch 3.4 (torch 2.0.1) lowers under another name.
_TORCH_RENAMES = {
    "_native_batch_norm_legit": "native_batch_norm",
    "_native_batch_norm_legit_no_training": "native_batch_norm",
    "_native_batch_norm_legit_functional": "native_batch_norm",
    "native_dropout": "dropout",
    "_unsafe_index": "index",
    "_unsafe_index_put": "index_put",
    "lift_fresh": "detach",
    "lift_fresh_copy": "clone",
}
# Torch functions newer torch decomposes before dispatch into operators poptorch lowers, which torch 2.0.1
# dispatched as an operator poptorch 3.4 has no handler for.
_DECOMPOSED_HERE = {"repeat_interleave": "aten::repeat_interleave"}
# Kernels that call other operators. Not CompositeExplicitAutogradNonFunctional: a structured operator's functional
# form calls its own out= form, which reaches the IPU under the same name (linalg_inv_ex).
# Operators with a data-dependent output shape that still have a meta kernel under poptorch 3.4.
_OWN_META_KERNELS = frozenset({"aten::nonzero", "aten::bincount", "aten::one_hot", "aten::index"})
_COMPOSITE_KEYS = (torch._C.DispatchKey.CompositeExplicitAutograd, torch._C.DispatchKey.CompositeImplicitAutograd)


@functools.lru_cache(maxsize=None)
def table() -> dict[str, Any]:
    """The generated table of poptorch 3.4's lowered operators and error texts (``poptorch_3_4_ops.json``)."""
    loaded: dict[str, Any] = json.loads(_TABLE.read_text())
    return loaded


def message(key: str, **fields: Any) -> str:
    """The text ``key`` of poptorch from the table, with its ``{fields}`` filled in."""
    text: str = table()["messages"][key]
    return text.format(**fields) if fields else text


def decomposed_here(function_name: str) -> str | None:
    """The operator poptorch 3.4 would have recorded for a torch function this torch decomposes (or ``None``)."""
    return _DECOMPOSED_HERE.get(function_name)


@functools.lru_cache(maxsize=None)
def lowers(op: torch._ops.OpOverload) -> bool:
    """Whether poptorch 3.4 lowers ``op`` (or the operators it decomposes into before reaching the IPU)."""
    data = table()
    name = op._schema.name.split("::", 1)[1]
    name = _TORCH_RENAMES.get(name, name)
    lowered = data["lowered"]
    if name in lowered or name in data["removed_by_passes"]:
        return True
    if name.endswith("_") and name not in data["only_inplace"]:
        # The in-place pass renames aten::<op>_ to its out-of-place form (InplaceOps.cpp outplaceKind).
        outplace = data["inplace_to_outplace"].get(name, name[:-1])
        if outplace in lowered:
            return True
    overload = f"{name}.{op._overloadname}" if op._overloadname != "default" else name
    if overload in data["intercepted"] or name in data["intercepted"]:
        return False
    # The dispatcher's own query: OpOverload.has_kernel_for_dispatch_key is newer than poptorch's torch 2.0.1.
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key) for key in _COMPOSITE_KEYS)


def _value(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def _refuse_dynamic_shape(node: torch.fx.Node, op: torch._ops.OpOverload) -> None:
    """The refusals of poptorch's meta kernels, which run as each operator is traced (``TypeInferenceHandler.cpp``)."""
    name = op._schema.name
    if name == "aten::nonzero":
        raise Error(message("nonzero"))
    if name == "aten::bincount":
        minlength: Any = node.kwargs.get("minlength", node.args[2] if len(node.args) > 2 else 0)
        if minlength <= 0:
            raise Error(message("bincount_minlength"))
    if torch.Tag.dynamic_output_shape in op.tags and name not in _OWN_META_KERNELS:
        # No meta kernel can give such a shape, and torch 2.0.1 has none for these (poptorch gives its own to
        # nonzero, bincount and one_hot, and torch's for aten::index refuses only a boolean mask, below).
        overload = "" if op._overloadname == "default" else f".{op._overloadname}"
        raise Error(message("no_meta_kernel", op=name + overload))
    if name == "aten::index":
        indices: Any = node.args[1]
        for index in indices:
            value = _value(index)
            if isinstance(value, torch.Tensor) and value.dtype in (torch.bool, torch.uint8):
                # What torch 2.0.1's meta kernel of aten::index raises (torch/_meta_registrations.py).
                raise torch._subclasses.fake_tensor.DynamicOutputShapeException(torch.ops.aten.index.Tensor)


def _live(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Nodes that reach the output or write in place: what poptorch's dead-code elimination keeps."""
    roots = [
        node
        for node in graph.nodes
        if node.op == "output" or (isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable)
    ]
    live: set[torch.fx.Node] = set()
    while roots:
        node = roots.pop()
        if node not in live:
            live.add(node)
            roots.extend(node.all_input_nodes)
    return live


def check_traced_graph(graph: torch.fx.Graph, composite_calls: list[str]) -> None:
    """Refuse what poptorch 3.4 refuses in a traced graph, in poptorch's order and with its texts.

    ``composite_calls`` are the operators poptorch would have recorded for torch functions this torch decomposes
    (see :func:`decomposed_here`).

    Raises:
        Error: For ``nonzero``, ``bincount`` without ``minlength`` or an operator without a meta kernel (while
            tracing, in poptorch), then for
            every operator without a lowering rule ("Unsupported ops found in compiled model: [...]").
        torch._subclasses.fake_tensor.DynamicOutputShapeException: For indexing with a boolean mask.
    """
    unsupported: dict[str, None] = {}
    live = _live(graph)
    for node in graph.nodes:
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
            continue
        _refuse_dynamic_shape(node, op)
        if node in live and not lowers(op):
            unsupported[op._schema.name] = None
    for name in composite_calls:
        unsupported[name] = None
    if unsupported:
        raise Error(message("unsupported_ops", ops=", ".join(unsupported)))
