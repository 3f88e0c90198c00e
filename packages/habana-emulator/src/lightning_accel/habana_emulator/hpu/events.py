"""Events of the emulated ``habana_frameworks.torch.hpu`` (the SDK's ``hpu/events.py``).

The emulator runs all work in issue order, so an event is complete as soon as it is recorded; ``elapsed_time``
measures host time between two recorded events.
"""

from __future__ import annotations

import time
import typing

from ._devices import synchronize as _synchronize

if typing.TYPE_CHECKING:
    from .streams import Stream

__all__ = ["Event"]


class Event:
    """An HPU event; ``elapsed_time`` measures host time between two recorded events, in milliseconds."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._recorded_at: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        """Record the event once the backing device has finished the work issued so far."""
        _synchronize()
        self._recorded_at = time.perf_counter()

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` wait for this event (already complete here)."""

    def query(self) -> bool:
        """Whether the event has completed: as soon as it is recorded."""
        return True

    def synchronize(self) -> None:
        """Wait for the event."""
        _synchronize()

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event to ``end_event``, both recorded with ``enable_timing=True``.

        Raises:
            RuntimeError: When either event was not recorded or not created with ``enable_timing=True``.
        """
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with enable_timing=True to measure elapsed time.")
        if self._recorded_at is None or end_event._recorded_at is None:
            raise RuntimeError("Both events must be recorded before elapsed_time() is called.")
        return (end_event._recorded_at - self._recorded_at) * 1000.0
