"""The capture core of the emulated HPU Graphs API: :class:`HPUGraph`, the :class:`graph` context manager.

``hpu.graphs`` exports these under the SDK's names (gaudi-pytorch-bridge bcc5172, the SDK 1.24 period,
``python_packages/habana_frameworks/torch/hpu/graphs.py``: ``class HPUGraph`` at ``:41``, ``class graph`` at ``:168``).
As on Gaudi the capture also executes the work, so the captured outputs hold real values afterwards. Inputs and
outputs are static tensors: copy new data into the captured inputs, call ``replay()``, read the captured outputs,
which are refreshed in place. The Python control flow of the capture is frozen. As on the SDK, both are lazy-mode
objects: creating either in eager mode raises ``RuntimeError`` (``:49-51``, ``:188-189``), although from the 1.24
period on ``hpu`` exports their names in both modes.

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
from .._not_emulated import NotEmulatedError
from ._recorder import Recorder, Recording
from .metrics import metrics as _metrics

__all__ = ["HPUGraph", "graph", "is_current_stream_capturing", "refuse_compiled", "refuse_eager_mode"]

# Only one capture may be underway in the process, as on the SDK.
_capturing: HPUGraph | None = None

_SDK_GRAPH = "habana_frameworks.torch.hpu.graphs.HPUGraph"
# The SDK's replay without its tensor cache (wrap_in_hpu_graph(disable_tensor_cache=True) underneath): marked user
# inputs are swapped for the caller's tensors at each replay and unneeded outputs freed after the capture.
_MARKED_IO = (
    "the SDK's replay with marked user inputs and outputs (the machinery under wrap_in_hpu_graph's "
    "disable_tensor_cache=True) swaps the graph's input tensors for others at each replay; the emulated graph replays "
    "on the tensors it captured. Copy new values into the captured inputs and call replay(), or use "
    "wrap_in_hpu_graph, which the emulator provides"
)


def _not_emulated_method(name: str, reason: str) -> NotEmulatedError:
    return NotEmulatedError(
        f"{_SDK_GRAPH}.{name} is not emulated: {reason}. It exists in the Gaudi SDK and works on Gaudi hardware; the "
        "software emulator (LIGHTNING_ACCEL_EMULATE=hpu) cannot reproduce it, so it refuses rather than pretend "
        "(docs/emulator.md lists what is not emulated)."
    )


def _check_flag(value: object, owner: str, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{owner}({name}={value!r}) is not accepted. Accepted: True or False.")


_COMPILE_CONFLICT = (
    "HPU graphs cannot be combined with torch.compile (the SDK does not support it). Use either HPU graphs "
    "(wrap_in_hpu_graph, ModuleCacher, HPUGraph) on an uncompiled model, or torch.compile without HPU graphs."
)


def refuse_eager_mode(what: str) -> None:
    """Raise unless the SDK runs in lazy mode: graphs are lazy-mode objects (bridge bcc5172 ``hpu/graphs.py:49-51``).

    Raises:
        RuntimeError: In eager mode, naming ``what`` and the fix.
    """
    from ..core import is_lazy  # the core module imports this package

    if not is_lazy():
        raise RuntimeError(
            f"{what} is available in lazy mode only, and the SDK runs in eager mode (PT_HPU_LAZY_MODE=0 or unset, the "
            "default since SDK 1.21). HPU graphs are captured from lazy mode's graphs: set PT_HPU_LAZY_MODE=1 before "
            "the process starts (it is read once, when the SDK loads), or in eager mode build graphs with "
            "torch.compile(model, backend='hpu_backend') instead."
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
    """A captured region of HPU work that can be replayed (lazy mode only, as on the SDK).

    The SDK's replay with marked user inputs and outputs (``mark_user_inputs``, ``mark_user_outputs``, ``replayV2``,
    ``replayV3``, ``get_user_input_match_indices``) is not emulated: those methods refuse by name, with the reason.

    Raises:
        RuntimeError: When created in eager mode (``PT_HPU_LAZY_MODE=0`` or unset), as on the SDK.

    Example:
        >>> g = HPUGraph()  # doctest: +SKIP
        >>> with graph(g):  # doctest: +SKIP
        ...     static_out = model(static_in)
        >>> static_in.copy_(new_batch); g.replay()  # static_out now holds the new result  # doctest: +SKIP
    """

    def __init__(self) -> None:
        refuse_eager_mode("HPUGraph")
        self._recorder: Recorder | None = None
        self._recording: Recording | None = None
        self._inference = False

    @property
    def captured(self) -> bool:
        """Emulator only: whether a capture has ended and the graph can be replayed."""
        return self._recording is not None

    def capture_begin(self, dry_run: bool = False) -> None:
        """Begin capturing HPU work; the capture also executes it, as on Gaudi.

        Args:
            dry_run: ``False``. On Gaudi ``True`` records the work without executing it (a replay then computes it
                for the first time); the emulated capture always executes, so a dry run is refused rather than run
                twice by the replay that follows it.

        Raises:
            RuntimeError: When another capture is underway, or inside ``torch.compile``.
            NotImplementedError: For ``dry_run=True`` (not emulated).
            TypeError: When ``dry_run`` is not a bool.
        """
        global _capturing
        _check_flag(dry_run, "HPUGraph.capture_begin", "dry_run")
        if dry_run:
            raise _not_emulated_method(
                "capture_begin(dry_run=True)",
                "a dry-run capture records the work without executing it, and the emulated capture always executes "
                "it (a replay right after would then run in-place updates such as an optimizer step twice). Capture "
                "with dry_run=False (the default): the capture is then the first execution, so skip the replay that "
                "would follow a dry run",
            )
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

    def replay_with_inputs(self, tlistI: list[torch.Tensor] | None = None, asynchronous: bool = False) -> None:
        """Replay, given the tensors that stand in for the graph's marked user inputs (the SDK 1.24 period).

        On Gaudi the tensors replace the inputs marked with ``mark_user_inputs`` during the capture (the SDK's
        ``wrap_in_hpu_graph`` passes a call's inputs this way when one of them is a CPU float scalar). The emulated
        graph has no marked inputs (``mark_user_inputs`` is not emulated), so the tensors replace nothing: the call
        replays as :meth:`replay` does, on the captured inputs, as a Gaudi graph without marked inputs does.

        Args:
            tlistI: The tensors (a list or tuple of them), or ``None`` for none.
            asynchronous: As for :meth:`replay`.

        Raises:
            TypeError: When ``tlistI`` is not ``None`` or a list or tuple of tensors.
            RuntimeError: As :meth:`replay`.
        """
        inputs = [] if tlistI is None else tlistI
        if not isinstance(inputs, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in inputs):
            held = f" holding {[type(t).__name__ for t in inputs]}" if isinstance(inputs, (list, tuple)) else ""
            raise TypeError(
                "HPUGraph.replay_with_inputs(tlistI=...) needs None or a list of tensors, got "
                f"{type(tlistI).__name__}{held}."
            )
        self.replay(asynchronous)

    def replayV2(self, static_tlist: list[torch.Tensor], tlist: list[torch.Tensor], asynchronous: bool = False) -> None:
        """Not emulated: the SDK's replay that swaps static inputs for others (raises ``NotImplementedError``)."""
        raise _not_emulated_method("replayV2", _MARKED_IO)

    def replayV3(self, tlistI: list[torch.Tensor], asynchronous: bool = False) -> None:
        """Not emulated: the SDK's replay on marked user inputs (raises ``NotImplementedError``)."""
        raise _not_emulated_method("replayV3", _MARKED_IO)

    def mark_user_inputs(self, static_tlist: list[torch.Tensor]) -> None:
        """Not emulated: marks the capture's user inputs for ``replayV3`` (raises ``NotImplementedError``)."""
        raise _not_emulated_method("mark_user_inputs", _MARKED_IO)

    def mark_user_outputs(self, static_tlist: list[torch.Tensor], free_inplace: bool = True) -> None:
        """Not emulated: marks the outputs to keep, freeing the others after the capture (``NotImplementedError``)."""
        raise _not_emulated_method("mark_user_outputs", _MARKED_IO)

    def get_user_input_match_indices(self) -> set[int]:
        """Not emulated: which marked user inputs the graph reads (raises ``NotImplementedError``)."""
        raise _not_emulated_method("get_user_input_match_indices", _MARKED_IO)

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
    """Context manager that captures the HPU work of its block into ``hpu_graph`` (lazy mode only, as on the SDK).

    Args:
        hpu_graph: The graph to capture into.
        stream: The stream to capture on; the emulator runs all work in issue order, so any stream is the same.
        dry_run: ``False``; ``True`` is refused when the block starts (see :meth:`HPUGraph.capture_begin`).

    Raises:
        RuntimeError: When created in eager mode (``PT_HPU_LAZY_MODE=0`` or unset), as on the SDK.
        TypeError: When ``hpu_graph`` is not an :class:`HPUGraph`.
    """

    def __init__(self, hpu_graph: HPUGraph, stream: object | None = None, dry_run: bool = False) -> None:
        refuse_eager_mode("The HPU graph capture context manager (hpu.graph)")
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
