"""Emulation of the SDK's HPU Graphs API (``habana_frameworks.torch.hpu.graphs``).

An HPU graph records the device work of a region once and replays it with little host overhead. The emulator keeps
the semantics user code depends on:

* :class:`HPUGraph` (``capture_begin``, ``capture_end``, ``replay``) and the :class:`graph` context manager. As on
  Gaudi the capture also executes the work, so the captured outputs hold real values afterwards. Inputs and outputs
  are static tensors: copy new data into the captured inputs, call ``replay()``, read the captured outputs, which
  are refreshed in place. The Python control flow of the capture is frozen.
* :func:`make_graphed_callables`: forward and backward graphs of a module or function behind an autograd function.
* :class:`ModuleCacher`: one graphed callable per input signature (shapes, dtypes and non-tensor arguments) for the
  first ``max_graphs`` signatures; later ones run uncaptured, and nothing is evicted (as on the SDK).
* :func:`wrap_in_hpu_graph`: the same cache for a module's inference forward.

On the CPU backing a capture runs the work through the ``"hpu"`` device as usual and keeps its ATen operations as a
program over the backing tensors (see ``_recorder`` and ``_program``): a replay runs that program on the captured
memory at the backing device's speed, without the device's per-operation Python dispatch. On the CUDA backing it is
a :class:`torch.cuda.CUDAGraph`, replayed once at the end of the capture so that capturing executes the work as on
Gaudi. Graphs and ``torch.compile`` cannot be combined, as on Gaudi.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch

from .._backing import backing_type
from .._device import unwrap
from ._recorder import Recorder, Recording

__all__ = [
    "HPUGraph",
    "graph",
    "is_current_stream_capturing",
    "graph_autograd",
    "make_graphed_callables",
    "refuse_compiled",
]

# Only one capture may be underway in the process, as on the SDK.
_capturing: HPUGraph | None = None

_COMPILE_CONFLICT = (
    "HPU graphs cannot be combined with torch.compile (the SDK does not support it). Use either HPU graphs "
    "(wrap_in_hpu_graph, ModuleCacher, HPUGraph) on an uncompiled model, or torch.compile without HPU graphs."
)


def is_current_stream_capturing() -> bool:
    """Whether an HPU graph capture is underway."""
    return _capturing is not None


def refuse_compiled(target: object, argument: str) -> None:
    """Raise when ``target`` is a ``torch.compile``-d module or function (emulator helper, not an SDK name).

    Raises:
        RuntimeError: When ``target`` was compiled.
    """
    compiled = isinstance(target, torch._dynamo.eval_frame.OptimizedModule) or hasattr(
        target, "_torchdynamo_orig_callable"
    )
    forward = getattr(target, "forward", None)
    if compiled or (forward is not None and hasattr(forward, "_torchdynamo_orig_callable")):
        raise RuntimeError(f"{argument}={type(target).__name__} was compiled with torch.compile. {_COMPILE_CONFLICT}")


class HPUGraph:
    """A captured region of HPU work that can be replayed.

    Example:
        >>> g = HPUGraph()  # doctest: +SKIP
        >>> with graph(g):  # doctest: +SKIP
        ...     static_out = model(static_in)
        >>> static_in.copy_(new_batch); g.replay()  # static_out now holds the new result  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._recorder: Recorder | None = None
        self._recording: Recording | None = None
        self._cuda_graph: Any = None
        self._cuda_stream_context: Any = None
        self._inference = False

    @property
    def captured(self) -> bool:
        """Emulator only: whether a capture has ended and the graph can be replayed."""
        return self._recording is not None or (self._cuda_graph is not None and self._cuda_stream_context is None)

    def capture_begin(self, dry_run: bool = False) -> None:
        """Begin capturing HPU work.

        Args:
            dry_run: Accepted for compatibility with the SDK; the emulator always executes the captured work.

        Raises:
            RuntimeError: When another capture is underway, or inside ``torch.compile``.
        """
        global _capturing
        if _capturing is not None:
            raise RuntimeError(
                "capture_begin() was called while another HPU graph capture is underway. Only one capture may be in "
                "progress at a time: end the first with capture_end() (or leave its `with graph(...)` block)."
            )
        if torch.compiler.is_compiling():
            raise RuntimeError(_COMPILE_CONFLICT)
        self.reset()
        self._inference = torch.is_inference_mode_enabled()
        if backing_type() == "cuda":
            self._cuda_graph = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            self._cuda_stream_context = torch.cuda.stream(side)
            self._cuda_stream_context.__enter__()
            self._cuda_graph.capture_begin()
        else:
            self._recorder = Recorder()
            self._recorder.__enter__()
        _capturing = self

    def capture_end(self) -> None:
        """End the capture; ``replay()`` may be called from now on.

        Raises:
            RuntimeError: When this graph is not capturing.
        """
        global _capturing
        if _capturing is not self:
            raise RuntimeError("capture_end() was called on an HPUGraph that is not capturing; call capture_begin().")
        _capturing = None
        if self._cuda_graph is not None:
            self._cuda_graph.capture_end()
            context, self._cuda_stream_context = self._cuda_stream_context, None
            context.__exit__(None, None, None)
            # A CUDA capture only records; on Gaudi the capture also runs the work, so run it once.
            self._cuda_graph.replay()
            return
        assert self._recorder is not None
        recorder, self._recorder = self._recorder, None
        recorder.__exit__(None, None, None)
        self._recording = Recording(recorder.program, self._inference)

    def replay(self, asynchronous: bool = False) -> None:
        """Mark a step, then run the captured work again; captured outputs are refreshed in place.

        As on the SDK (``HPUGraph::replay`` in the bridge's ``backend/habana_device/HPUGraph.cpp``), a graph with no
        capture yet replays nothing: the call is then only the step marker.

        Args:
            asynchronous: Accepted for compatibility; the backing device decides (CPU work is synchronous).

        Raises:
            RuntimeError: When this graph is still capturing (the SDK's "GRAPH:: Capture in progress").
        """
        if _capturing is self:
            raise RuntimeError(
                "GRAPH:: Capture in progress: replay() was called on an HPUGraph that is still capturing; end the "
                "capture first (capture_end(), or leave its `with graph(...)` block)."
            )
        from ..core import mark_step  # the core imports this module

        mark_step()
        if self._cuda_graph is not None and self._cuda_stream_context is None:
            self._cuda_graph.replay()
        elif self._recording is not None:
            self._recording.replay()

    def clear_inputs(self) -> None:
        """Free the device data the graph holds for inputs it changed in place; the emulator holds none.

        On the SDK (bridge 1.19.0 ``backend/habana_device/HPUGraph.cpp``, ``HPUGraph::clear_inputs``) the lazy tensors
        that were both input and output of the captured graph (an in-place operation on an input) lose their device
        data, to free memory once the user no longer needs them. The emulated graph replays on the user's own
        tensors and keeps no such copies, so there is nothing to free; reading such an input afterwards works here,
        where on Gaudi its data is gone.
        """

    def reset(self) -> None:
        """Drop the captured graph and the memory it holds."""
        self._recording = None
        self._cuda_graph = None


class graph:
    """Context manager that captures the HPU work of its block into ``hpu_graph``.

    Args:
        hpu_graph: The graph to capture into.
        stream: Accepted for compatibility with the SDK.
        dry_run: Accepted for compatibility with the SDK.
    """

    def __init__(self, hpu_graph: HPUGraph, stream: object | None = None, dry_run: bool = False) -> None:
        if not isinstance(hpu_graph, HPUGraph):
            raise TypeError(f"graph(hpu_graph=...) needs an HPUGraph, got {type(hpu_graph).__name__}.")
        self.hpu_graph = hpu_graph
        self.dry_run = dry_run

    def __enter__(self) -> None:
        self.hpu_graph.capture_begin(self.dry_run)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.hpu_graph.capture_end()


# -- make_graphed_callables ------------------------------------------------------------------------------------------


def graph_autograd(
    func: Callable[..., Any],
    sample_args: tuple[torch.Tensor, ...],
    params: tuple[torch.Tensor, ...],
    warmups: int,
    allow_unused_input: bool,
    first_call_is_capture: bool = False,
) -> Callable[..., Any]:
    """Capture ``func``'s forward and backward; return a function of the user tensors that replays them.

    Emulator helper (not an SDK name): ``params`` are the tensors ``func`` uses besides its arguments (a module's
    parameters); their gradients come from the backward graph. With ``first_call_is_capture``, ``sample_args`` hold
    the first call's own inputs, so the first call returns what the capture computed instead of running the forward
    again (a second run would draw new random numbers, e.g. dropout masks, and do the work twice).
    """
    surface = sample_args + params
    for _ in range(warmups):
        warm = tuple(o for o in _as_tuple(func(*sample_args)) if isinstance(o, torch.Tensor) and o.requires_grad)
        warm_inputs = tuple(i for i in surface if i.requires_grad)
        if warm and warm_inputs:
            torch.autograd.grad(
                warm, warm_inputs, grad_outputs=[torch.zeros_like(o) for o in warm], allow_unused=allow_unused_input
            )
    forward_graph = HPUGraph()
    with graph(forward_graph):
        raw = func(*sample_args)
    static_outputs = _as_tuple(raw)
    if not all(isinstance(o, torch.Tensor) for o in static_outputs):
        raise TypeError(
            "make_graphed_callables needs callables that return a tensor or a tuple of tensors; got "
            f"{[type(o).__name__ for o in static_outputs]}. Return tensors only (or use ModuleCacher)."
        )
    static_grad_outputs = tuple(torch.zeros_like(o) if o.requires_grad else None for o in static_outputs)
    needs_grad = tuple(i for i in surface if i.requires_grad)
    backward_graph = HPUGraph()
    grads: tuple[torch.Tensor | None, ...] = ()
    differentiable = tuple(o for o in static_outputs if o.requires_grad)
    if differentiable and needs_grad:
        with graph(backward_graph):
            grads = torch.autograd.grad(
                differentiable,
                needs_grad,
                grad_outputs=tuple(g for g in static_grad_outputs if g is not None),
                allow_unused=allow_unused_input,
                materialize_grads=allow_unused_input,
            )
    grad_iter = iter(grads)
    static_grad_inputs = tuple(next(grad_iter) if i.requires_grad else None for i in surface)
    user_count = len(sample_args)
    pending_capture = [first_call_is_capture]

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            if pending_capture[0]:
                pending_capture[0] = False
                return tuple(o.detach() for o in static_outputs)
            for static, new in zip(sample_args, inputs[:user_count], strict=False):
                # An "hpu" tensor's memory is its backing tensor's (the wrapper's data_ptr() is not an address).
                if unwrap(static).data_ptr() != unwrap(new).data_ptr():
                    static.copy_(new)
            forward_graph.replay()
            return tuple(o.detach() for o in static_outputs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
            for static, new in zip(static_grad_outputs, grad_outputs, strict=False):
                if static is not None and new is not None:
                    static.copy_(new)
            if backward_graph.captured:
                backward_graph.replay()
            return tuple(g.detach() if g is not None else None for g in static_grad_inputs)

    def graphed(*user_args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs: tuple[torch.Tensor, ...] = Graphed.apply(*(user_args + params))
        return outputs

    def run(*user_args: torch.Tensor) -> Any:
        out = graphed(*user_args)
        return out[0] if isinstance(raw, torch.Tensor) else out

    return run


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


def _check_module(module: torch.nn.Module) -> None:
    refuse_compiled(module, "callables")
    if module._backward_hooks or module._forward_hooks or module._forward_pre_hooks:
        raise ValueError(
            f"make_graphed_callables got a {type(module).__name__} with hooks registered. Register hooks after "
            "passing the module to make_graphed_callables, not before."
        )
    if any(b.requires_grad for b in module.buffers()):
        raise ValueError(
            f"make_graphed_callables got a {type(module).__name__} with a buffer that requires grad; only parameters "
            "may be trainable. Make it an nn.Parameter or set requires_grad=False on the buffer."
        )


def make_graphed_callables(
    callables: Any,
    sample_args: Any,
    warmups: int = 0,
    allow_unused_input: bool = False,
    asynchronous: bool = False,
    disable_tensor_cache: bool = False,
    dry_run: bool = False,
) -> Any:
    """Graph the forward and backward of a module or function (or a tuple of them).

    A graphed module runs its graphs while its ``training`` flag is what it was at capture, and its original forward
    otherwise. Outputs are the graph's static tensors: they are overwritten by the next call.

    Args:
        callables: A module or function, or a tuple of them in the order they run.
        sample_args: A tuple of tensors for one callable, or a tuple of such tuples.
        warmups: Eager forward and backward runs before the capture.
        allow_unused_input: Allow inputs that do not influence the outputs (their gradient is zero).
        asynchronous: Accepted for compatibility with the SDK.
        disable_tensor_cache: Accepted for compatibility with the SDK.
        dry_run: Accepted for compatibility with the SDK.

    Raises:
        TypeError: When a sample argument is not a tensor, or a callable returns something else than tensors.
        ValueError: When a module has hooks or a trainable buffer.
    """
    single = not isinstance(callables, tuple)
    items = (callables,) if single else callables
    samples = (sample_args,) if single else sample_args
    results: list[Any] = []
    for func, args in zip(items, samples, strict=False):
        args = tuple(args)
        if not all(isinstance(a, torch.Tensor) for a in args):
            raise TypeError(
                "make_graphed_callables(sample_args=...) must be a tuple of tensors for each callable; got "
                f"{[type(a).__name__ for a in args]}. Pass keyword and non-tensor arguments through a wrapper."
            )
        params: tuple[torch.Tensor, ...] = ()
        if isinstance(func, torch.nn.Module):
            _check_module(func)
            params = tuple(func.parameters())
            training = func.training
            original = func.forward
            graphed = graph_autograd(original, args, params, warmups, allow_unused_input)

            def forward(
                *user_args: Any, _m: Any = func, _g: Any = graphed, _o: Any = original, _t: bool = training
            ) -> Any:
                # As on the SDK: the graphs hold one training mode; the other mode runs the original forward.
                return _g(*user_args) if _m.training == _t else _o(*user_args)

            func.forward = forward
            results.append(func)
        else:
            refuse_compiled(func, "callables")
            results.append(functools.wraps(func)(graph_autograd(func, args, params, warmups, allow_unused_input)))
    return results[0] if single else tuple(results)
