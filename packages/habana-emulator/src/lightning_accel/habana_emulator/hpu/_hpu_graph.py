"""The capture core of the emulated HPU Graphs API: :class:`HPUGraph`, the :class:`graph` context manager.

``hpu.graphs`` exports these under the SDK's names (gaudi-pytorch-bridge 1.19.0
``python_packages/habana_frameworks/torch/hpu/graphs.py:42-184``). As on Gaudi the capture also executes the work, so
the captured outputs hold real values afterwards. Inputs and outputs are static tensors: copy new data into the
captured inputs, call ``replay()``, read the captured outputs, which are refreshed in place. The Python control flow
of the capture is frozen.

A capture runs the work through the ``"hpu"`` device as usual and keeps its ATen operations as a program over host
views of the captured memory (see ``_recorder`` and ``_program``): a replay runs that program on the same memory,
without dispatching through the device. Graphs and ``torch.compile`` cannot be combined, as on Gaudi
(:func:`refuse_compiled`).
"""

from __future__ import annotations

import time
from types import TracebackType

import torch

from .. import _lazy_graphs
from ._recorder import Recorder, Recording
from .metrics import metrics as _metrics

__all__ = ["HPUGraph", "graph", "is_current_stream_capturing", "refuse_compiled"]

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
    """Raise when ``target`` is a ``torch.compile``-d module or function (the graph APIs take uncompiled ones).

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
        self._inference = False

    @property
    def captured(self) -> bool:
        """Emulator only: whether a capture has ended and the graph can be replayed."""
        return self._recording is not None

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
        _lazy_graphs.end_graph()  # the bridge marks a step first (HPUGraph::capture_begin): pending work compiles
        self._inference = torch.is_inference_mode_enabled()
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
        assert self._recorder is not None
        recorder, self._recorder = self._recorder, None
        recorder.__exit__(None, None, None)
        _lazy_graphs.discard_graph()  # the captured work: compiled below as the graph's own recipe, not a lazy graph
        # Metrics hook: the SDK compiles the captured graph into one Synapse recipe at capture end, which emits
        # GRAPH_COMPILE (backend/synapse_helpers/graph.cpp:612-620); the emulator's counterpart is building the program.
        started = time.perf_counter_ns()
        self._recording = Recording(recorder.program, self._inference)
        _metrics._record_graph_compilation(f"hpu_graph_{id(self):x}", (time.perf_counter_ns() - started) // 1000)

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
        if self._recording is not None:
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
