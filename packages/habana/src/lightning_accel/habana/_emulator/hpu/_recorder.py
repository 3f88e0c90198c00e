"""Capture and replay of device work on the CPU backing, for the emulated HPU graphs.

While a capture is underway a :class:`~torch.utils._python_dispatch.TorchDispatchMode` records every ATen operation
that runs, forward and backward passes and optimizer updates alike, with the very tensors it read and wrote. A
replay runs the recorded operations again on those tensors, in order: operations that write in place or return views
act on the same memory as during the capture, and every other result is copied into the tensor the capture returned.
So, exactly as with HPU (and CUDA) graphs:

* inputs are static: a replay reads the tensors the capture read, so new data must be copied into them;
* outputs are static: a replay refreshes the captured output tensors in place;
* Python control flow is frozen: a replay repeats the operations the capture ran, whatever the data says now;
* an operation whose output shape depends on the data cannot be replayed with other data (a clear error).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["Recorder", "Recording"]

# Profiler bookkeeping ops mark ranges in a trace; they are not device work and are not replayed.
_NOT_REPLAYED = frozenset({"profiler"})


@dataclass(frozen=True)
class _Op:
    func: torch._ops.OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any
    refresh: bool


def _returns_fresh_memory(func: torch._ops.OpOverload) -> bool:
    # Views, in-place and out= variants alias an input: replaying them already acts on the captured memory.
    return not any(ret.alias_info is not None for ret in func._schema.returns)


class Recorder(TorchDispatchMode):
    """Records the ATen operations that run while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[_Op] = []

    def __torch_dispatch__(
        self, func: torch._ops.OpOverload, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        output = func(*args, **kwargs)
        if func.namespace not in _NOT_REPLAYED:
            self.ops.append(_Op(func, args, kwargs, output, _returns_fresh_memory(func)))
        return output


class Recording:
    """The operations of one capture, ready to replay."""

    def __init__(self, ops: list[_Op], inference: bool) -> None:
        self._ops = ops
        self._inference = inference

    def __len__(self) -> int:
        return len(self._ops)

    def replay(self) -> None:
        """Run the captured operations again on the captured tensors.

        Raises:
            RuntimeError: When an operation now produces a result of another shape (a dynamic operation).
        """
        # Autograd was recorded as explicit backward operations; replaying must not build a new graph.
        grad_context = torch.inference_mode() if self._inference else torch.no_grad()
        with grad_context:
            for op in self._ops:
                result = op.func(*op.args, **op.kwargs)
                if op.refresh:
                    _refresh(op.output, result, op.func)


def _refresh(captured: Any, result: Any, func: torch._ops.OpOverload) -> None:
    if isinstance(captured, torch.Tensor) and isinstance(result, torch.Tensor):
        if captured.shape != result.shape:
            raise RuntimeError(
                f"HPU graph replay: {func} produced shape {tuple(result.shape)}, but the captured graph holds "
                f"{tuple(captured.shape)}. Operations whose output shape depends on the data (dynamic ops such as "
                "nonzero or boolean indexing) cannot be replayed; run them outside the graph and wrap the static "
                "parts on either side in their own graphs (see 'HPU Graphs and Dynamicity in Models')."
            )
        captured.copy_(result)
    elif isinstance(captured, (list, tuple)) and isinstance(result, (list, tuple)):
        for old, new in zip(captured, result, strict=False):
            _refresh(old, new, func)
