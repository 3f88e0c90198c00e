"""Streams and events of the emulated ``habana_frameworks.torch.hpu`` (DeepSpeed's HPU accelerator uses them).

The SDK's ``hpu.Stream`` / ``hpu.Event`` follow torch's CUDA API (gaudi-pytorch-bridge ``hpu/streams.py``,
``hpu/events.py``). The emulator runs every operation in issue order on its backing device, so there is one stream
in effect: a stream or event has nothing to wait for beyond the backing device's own queue (empty on the CPU; the
current CUDA stream on the CUDA backing, which ``synchronize`` waits for). What only hardware shows: overlap of
compute and copies on separate streams, and the timings of device work.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .. import _not_emulated
from ._devices import synchronize as _synchronize
from .events import Event as _Event

__all__ = ["Stream", "current_stream", "default_stream", "stream"]


class Stream(torch.Stream):
    """An HPU stream (a ``torch.Stream`` of the ``"hpu"`` device, so ``tensor.record_stream(stream)`` accepts it).

    Work on the emulator runs in issue order, so waiting on another stream or event is immediate.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        return super().__new__(cls, device="hpu", priority=priority)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        pass

    def wait_event(self, event: _Event) -> None:  # type: ignore[override]  # the emulator's events are its own
        """Make later work wait for ``event`` (already complete here)."""

    def wait_stream(self, stream: Stream) -> None:  # type: ignore[override]
        """Make later work wait for the work queued on ``stream`` (already issued in order here)."""

    def record_event(self, event: _Event | None = None) -> _Event:  # type: ignore[override]
        """Record ``event`` (a new one when ``None``) on this stream."""
        event = _Event() if event is None else event
        event.record(self)
        return event

    def query(self) -> bool:
        """Whether all queued work is complete."""
        return True

    def synchronize(self) -> None:
        """Wait for the queued work of the backing device."""
        _synchronize()

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


_not_emulated.provide(
    globals(),
    "habana_frameworks.torch.hpu.streams",
    ("StreamContext", "get_stream_info", "is_lazy_mode", "record_stream", "set_stream"),
    listed_in="habana_frameworks.torch.hpu",
)
