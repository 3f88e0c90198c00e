"""At exit, let the HPU's autograd thread finish with the last backward before the interpreter ends.

Why: in torch 2.13 (not in 2.11 and earlier), every ``backward()`` stashes a Python object (a copy of the caller's
``contextvars`` context, ``torch.autograd.graph._engine_run_backward``) in the thread-local state that its graph task
carries. Nodes on a non-CPU device run on that device's autograd thread, a C++ thread, which drops its reference to
the graph task, and with it the Python object, only after it has told the caller that the backward finished. When the
process ends within that window (a script whose last line is a ``backward()`` or an optimizer step, a short Trainer
run on a busy machine), the thread takes the GIL while the interpreter is finalizing, Python ends the thread, and the
process aborts with "terminate called without an active exception" (exit status 134) after a run that succeeded.
CUDA's autograd thread is exposed the same way; the HPU's, on Gaudi and on the emulator, too.

The cure, run once at exit (before the interpreter's teardown): one tiny backward on the HPU, started without the
stash. The device thread takes tasks in order, so when it returns the thread has finished every earlier backward and
dropped what they held; its own graph task holds no Python object.
"""

from __future__ import annotations

import atexit
import functools

import torch

__all__ = ["finish_autograd_at_exit"]


@functools.cache
def finish_autograd_at_exit() -> None:
    """Register, once per process, the exit handler that lets the HPU's autograd thread finish (see the module)."""
    atexit.register(_finish_autograd)


def _finish_autograd() -> None:
    try:
        leaf = torch.zeros((), device="hpu", requires_grad=True)
        root = leaf * 1.0
        seed = torch.ones((), device="hpu")
    except RuntimeError:
        # The device is gone (a failed run, a lost module): no backward can be left on its thread either.
        return
    # The engine's own entry, not torch.autograd.backward: that one would stash this frame's context again.
    engine = torch.autograd.Variable._execution_engine
    engine.run_backward((root,), (seed,), False, False, (), True, True)
    # The graph's tensors are freed here, on this thread, with the interpreter still whole.
    del leaf, root, seed
