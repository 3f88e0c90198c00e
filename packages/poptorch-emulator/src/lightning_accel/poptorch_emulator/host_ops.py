"""``poptorch.CPU``: a host function called from the middle of an IPU graph, every time the graph runs.

poptorch 3.4 (``python/ops.py:896-1012``) traces the function once on zeros shaped like its inputs, with its own
dispatcher off, to learn the shapes of its outputs; the compiled graph then streams the inputs to the host, calls
the function on float32 host buffers of those shapes, and streams its outputs back (``registerBuffersWithCallback``,
``CPUOffloadingCleanUp.cpp``). The function's Python therefore runs on every execution, unlike the rest of the model,
which runs once, when it is traced. A module passed as the function has ``requires_grad_(False)`` called on it.

The emulator records the call as one operator of the traced graph (``poptorch_emulator::cpu_op``), whose kernel calls
the function on host buffers each time the graph runs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .errors import Error
from .tracing import current_context, running_outside_device

__all__ = ["CPU"]

_LIBRARY = torch.library.Library("poptorch_emulator", "DEF")
_LIBRARY.define("cpu_op(Tensor[] inputs, str key) -> Tensor[]")
# Every host call a traced graph makes, by the key its node holds (the graph outlives the model's Python): the
# function's wrapper, and the shapes of that call's inputs and the shapes and types of its outputs.
_REGISTERED: dict[str, tuple[CPU, list[torch.Size], list[tuple[torch.Size, torch.dtype]]]] = {}
# Set while the model is traced: the operator returns zeros, as poptorch's trace gives the IPU outputs.
_tracing: ContextVar[bool] = ContextVar("poptorch_emulator_cpu_op_tracing", default=False)


def _cpu_op(inputs: list[torch.Tensor], key: str) -> list[torch.Tensor]:
    op, in_shapes, out_specs = _REGISTERED[key]
    if _tracing.get():
        return [torch.zeros(shape, dtype=dtype) for shape, dtype in out_specs]
    return op._run_on_host(inputs, in_shapes, out_specs)


_LIBRARY.impl("cpu_op", _cpu_op, "CompositeExplicitAutograd")


class CPU:
    """Call ``layer_to_call`` on the host from inside an IPU model (inference graphs only, as in poptorch).

    Args:
        layer_to_call: The function or module to run on the host; the wrapper's arguments are passed to it.
        ID: The name of the host operation.

    Example:
        >>> class Model(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.double = CPU(lambda x: x * 2.0, "Double")
        ...
        ...     def forward(self, x):
        ...         return self.double(x) + 1.0
        >>> Model()(torch.ones(2)).tolist()
        [3.0, 3.0]
    """

    def __init__(self, layer_to_call: Callable[..., Any], ID: str) -> None:
        if not callable(layer_to_call):
            raise TypeError(
                f"poptorch.CPU: layer_to_call must be a function or a torch.nn.Module, got "
                f"{type(layer_to_call).__name__}."
            )
        if not isinstance(ID, str):
            raise TypeError(f"poptorch.CPU: ID must be a str naming the host operation, got {ID!r}.")
        self._layer_to_call = layer_to_call
        if isinstance(layer_to_call, torch.nn.Module):
            layer_to_call.requires_grad_(False)
        self._ID = ID
        self.in_shapes: list[torch.Size] | None = None
        self.out_shapes: list[torch.Size] | None = None
        self.inputs: list[torch.Tensor] | None = None
        self.outputs: list[torch.Tensor] | None = None

    def registerPersistentData(self) -> None:
        """Allocate the float32 host buffers of the last traced call (poptorch's ``inputs`` and ``outputs``)."""
        assert self.in_shapes is not None and self.out_shapes is not None, "poptorch.CPU: call it in a model first"
        self.inputs = [torch.zeros(shape) for shape in self.in_shapes]
        self.outputs = [torch.zeros(shape) for shape in self.out_shapes]

    def execute(self) -> None:
        """Call the function on ``inputs`` and copy its results into ``outputs`` (what a graph's callback does)."""
        assert self.inputs is not None and self.outputs is not None, "poptorch.CPU: registerPersistentData() first"
        outs = self._layer_to_call(*self.inputs)
        for persistent, value in zip(self.outputs, outs if isinstance(outs, (list, tuple)) else [outs]):
            persistent.copy_(value)

    def _run_on_host(
        self,
        inputs: list[torch.Tensor],
        in_shapes: list[torch.Size],
        out_specs: list[tuple[torch.Size, torch.dtype]],
    ) -> list[torch.Tensor]:
        """One call from the running graph: the function on float32 host buffers holding ``inputs``."""
        buffers = [torch.zeros(shape).copy_(value) for shape, value in zip(in_shapes, inputs)]
        outs = self._layer_to_call(*buffers)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        results = []
        for (shape, dtype), value in zip(out_specs, outs):
            results.append(torch.zeros(shape).copy_(value).to(dtype))
        return results

    def __call__(self, *input: torch.Tensor, **kwargs: Any) -> Any:
        """Run the function: directly on the host, through the graph's host callback on the (emulated) IPU."""
        context = current_context()
        if context is None:
            return self._layer_to_call(*input)
        if context.training:
            # poptorch documents CPU ops for inference graphs only (python/ops.py:899); no gradient flows through the
            # host callback, which would train the weights before it on part of their gradient.
            raise Error(
                f"poptorch.CPU({self._ID!r}) is only supported in inference graphs: it ran in a trainingModel. Call it "
                "from a model wrapped with poptorch.inferenceModel, or compute it with torch operations in the model."
            )
        # The trace's call, on zeros and outside the device (poptorch disables its dispatcher for it).
        with running_outside_device(), _disable_current_modes(), torch._C.DisableTorchFunction():
            cpu_input = [torch.zeros_like(i, device="cpu") for i in input]
            cpu_outputs = self._layer_to_call(*cpu_input)
        single = not isinstance(cpu_outputs, (list, tuple))
        outs = [cpu_outputs] if single else list(cpu_outputs)
        self.in_shapes = [i.shape for i in input]
        self.out_shapes = [o.shape for o in outs]
        # One key per call: the same wrapper may be called on differently shaped inputs in one model.
        key = f"{self._ID}@{id(self):x}#{len(_REGISTERED)}"
        _REGISTERED[key] = (self, list(self.in_shapes), [(o.shape, o.dtype) for o in outs])
        token = _tracing.set(True)
        try:
            outputs = torch.ops.poptorch_emulator.cpu_op(list(input), key)
        finally:
            _tracing.reset(token)
        return outputs[0] if single else outputs
