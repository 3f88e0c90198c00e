"""Capture and replay of device work on the CPU backing, for the emulated HPU graphs.

While a capture is underway a :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees every ATen operation
that runs, forward and backward passes and optimizer updates alike. Each one runs as it would outside the capture
(on the ``"hpu"`` device, with its rules and errors), and its form over host views of the same memory is kept in a
:class:`~._program.BackingProgram`. A replay runs that program: the same operations, in order, on the memory the
capture used, without a dispatch mode. So, exactly as with HPU (and CUDA)
graphs:

* inputs are static: a replay reads the tensors the capture read, so new data must be copied into them;
* outputs are static: a replay refreshes the captured output tensors in place;
* Python control flow is frozen: a replay repeats the operations the capture ran, whatever the data says now;
* an operation whose output shape depends on the data cannot be replayed with other data (a clear error).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ._program import BackingProgram

__all__ = ["Recorder", "Recording"]


class Recorder(TorchDispatchMode):
    """Runs and records the ATen operations that run while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.program = BackingProgram()

    def __torch_dispatch__(
        self, func: torch._ops.OpOverload, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        output = func(*args, **kwargs)
        self.program.record(func, args, kwargs, output)
        return output


class Recording:
    """The program of one capture, ready to replay."""

    def __init__(self, program: BackingProgram, inference: bool) -> None:
        self._program = program
        self._inference = inference

    def __len__(self) -> int:
        """The number of operations a replay runs."""
        return len(self._program)

    def replay(self) -> None:
        """Run the captured operations again on the captured memory.

        Raises:
            RuntimeError: When an operation now produces a result of another shape (a dynamic operation).
        """
        # Autograd was recorded as explicit backward operations, and autocast's casts as explicit casts: replaying
        # must neither build a new autograd graph nor cast again.
        grad_context = torch.inference_mode() if self._inference else torch.no_grad()
        with grad_context, torch._C._DisableAutocast():
            self._program.replay()
