"""The exception poptorch raises from its executors (``poptorch.Error``)."""

from __future__ import annotations

__all__ = ["Error", "RecoverableError", "UnrecoverableError"]


class Error(Exception):
    """An error raised by the (emulated) PopTorch runtime: an ``Exception``, as in poptorch (``poptorch.cpp:627``).

    Like poptorch's own error it carries ``type``, ``message`` and ``location``; ``str()`` of it starts with
    ``'poptorch_py_error': `` followed by the message, as poptorch prints it.

    Example:
        >>> err = Error("Device is not attached")
        >>> err.message
        'Device is not attached'
    """

    def __init__(self, message: str, error_type: str = "poptorch_py_error") -> None:
        super().__init__(f"'{error_type}': {message}")
        self.type = error_type
        self.message = message
        self.location = ""


class RecoverableError(Error):
    """A runtime error after which the IPU can be used again once ``recovery_action`` is done."""

    def __init__(self, message: str, error_type: str = "poptorch_py_error", recovery_action: str = "") -> None:
        super().__init__(message, error_type)
        self.recovery_action = recovery_action


class UnrecoverableError(Error):
    """A runtime error after which the IPU cannot be used again in this process."""
