"""Streams and events of the emulated ``habana_frameworks.torch.hpu`` (DeepSpeed's HPU accelerator uses them).

The SDK's ``hpu.Stream`` / ``hpu.Event`` follow torch's CUDA API (gaudi-pytorch-bridge ``hpu/streams.py``,
``hpu/events.py``). The emulator runs every operation in issue order on its backing device, so there is one stream
in effect: a stream or event has nothing to wait for beyond the backing device's own queue (empty on the CPU; the
current CUDA stream on the CUDA backing, which ``synchronize`` waits for). What only hardware shows: overlap of
compute and copies on separate streams, and the timings of device work.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ._devices import synchronize

__all__ = ["Event", "Stream", "current_stream", "default_stream", "stream"]


class Stream(torch.Stream):
    """An HPU stream (a ``torch.Stream`` of the ``"hpu"`` device, so ``tensor.record_stream(stream)`` accepts it).

    Work on the emulator runs in issue order, so waiting on another stream or event is immediate.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        return super().__new__(cls, device="hpu", priority=priority)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        pass

    def wait_event(self, event: Event) -> None:  # type: ignore[override]  # the emulator's events are its own
        """Make later work wait for ``event`` (already complete here)."""

    def wait_stream(self, stream: Stream) -> None:  # type: ignore[override]
        """Make later work wait for the work queued on ``stream`` (already issued in order here)."""

    def record_event(self, event: Event | None = None) -> Event:  # type: ignore[override]
        """Record ``event`` (a new one when ``None``) on this stream."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def query(self) -> bool:
        """Whether all queued work is complete."""
        return True

    def synchronize(self) -> None:
        """Wait for the queued work of the backing device."""
        synchronize()

    def __eq__(self, other: object) -> bool:
        # One stream in effect: every stream object stands for it.
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return hash(Stream)


_DEFAULT: Stream | None = None


def _default() -> Stream:
    # Built on first use: a torch.Stream of "hpu" needs the device registered, which happens after this module loads.
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Stream()
    return _DEFAULT


class Event:
    """An HPU event; ``elapsed_time`` measures host time between two recorded events, in milliseconds."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._recorded_at: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        """Record the event once the backing device has finished the work issued so far."""
        synchronize()
        self._recorded_at = time.perf_counter()

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` wait for this event (already complete here)."""

    def query(self) -> bool:
        """Whether the event has completed: as soon as it is recorded."""
        return True

    def synchronize(self) -> None:
        """Wait for the event."""
        synchronize()

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


def current_stream(device: Any = None) -> Stream:
    """The stream work is issued to."""
    return _default()


def default_stream(device: Any = None) -> Stream:
    """The default stream."""
    return _default()


@contextmanager
def stream(stream: Stream | None) -> Iterator[None]:
    """Issue the work inside the block to ``stream`` (in issue order with all other work here)."""
    yield
