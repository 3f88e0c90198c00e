"""What to do when a step fails inside Inductor: compile for HPUs with ``hpu_backend``.

Inductor, ``torch.compile``'s default backend, has no code generation for HPUs: a step that reaches an Inductor-compiled
function with HPU tensors fails inside it, in torch's words (``backend='inductor' raised: ... KeyError: 'hpu'``). The
HPU strategies compile a model given to the Trainer with ``hpu_backend`` (``_compile_default_backend``), but a function
compiled with ``@torch.compile``, or a module compiled outside the model, cannot be seen at set-up. When the Trainer's
run fails so, the HPU strategies add what to do to torch's error (``Strategy.on_exception``), without changing its type.
"""

from __future__ import annotations

__all__ = ["explain_inductor_failure"]

_HINT = (
    "lightning-accel: Inductor, torch.compile's default backend, cannot compile for HPUs. The model given to the "
    "Trainer is compiled with 'hpu_backend' for you; a function compiled with @torch.compile, or a module compiled "
    "outside the model, is not: compile it with torch.compile(..., backend='hpu_backend')."
)


def explain_inductor_failure(exception: BaseException) -> None:
    """Add the hint to ``exception`` when it is Dynamo's error for a failure inside Inductor; leave others alone."""
    from torch._dynamo.exc import BackendCompilerFailed

    if not isinstance(exception, BackendCompilerFailed) or exception.backend_name != "inductor":
        return
    if _HINT in getattr(exception, "__notes__", ()) or (exception.args and _HINT in str(exception.args[0])):
        return  # a strategy of several mixins meets the same error twice
    if hasattr(exception, "add_note"):
        exception.add_note(_HINT)
    elif exception.args:  # Python 3.10, the SDK's on Ubuntu 22.04: no notes; the message carries it
        exception.args = (f"{exception.args[0]}\n{_HINT}", *exception.args[1:])
