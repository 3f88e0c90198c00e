"""The few standard-library features newer than Python 3.8 that lightning-accel-core and its vendor packages use.

The core and lightning-accel-graphcore support Python 3.8 because the Poplar SDK's poptorch 3.3 and 3.4 wheels are
built for it (``poptorch-3.3.0+...-ubuntu_20_04-cp38-cp38-linux_x86_64.whl``); the other vendor packages need 3.10.

Example:
    >>> list(strict_zip([1, 2], "ab"))
    [(1, 'a'), (2, 'b')]
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from importlib.metadata import Distribution, EntryPoint, distributions, entry_points
from typing import Any

__all__ = ["entry_points_of", "strict_zip"]


def entry_points_of(group: str) -> list[tuple[EntryPoint, Distribution | None]]:
    """The installed entry points of ``group``, each with its distribution (``EntryPoint.dist`` from Python 3.10).

    As ``importlib.metadata.entry_points(group=...)`` does, a distribution installed twice on ``sys.path`` counts
    once (the first one found).
    """
    if sys.version_info >= (3, 10):
        return [(entry, entry.dist) for entry in entry_points(group=group)]
    found: list[tuple[EntryPoint, Distribution | None]] = []
    seen: set[str] = set()
    for dist in distributions():
        name = re.sub(r"[-_.]+", "-", (dist.metadata["Name"] or "")).lower()
        if name in seen:
            continue
        seen.add(name)
        found.extend((entry, dist) for entry in dist.entry_points if entry.group == group)
    return found


def strict_zip(*iterables: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """``zip(..., strict=True)``: the items side by side, and a ``ValueError`` when the lengths differ.

    Raises:
        ValueError: When one iterable is shorter than another (after yielding the common part, as ``zip`` does).
    """
    iterators = [iter(iterable) for iterable in iterables]
    sentinel = object()
    while True:
        items = [next(iterator, sentinel) for iterator in iterators]
        if all(item is sentinel for item in items):
            return
        if any(item is sentinel for item in items):
            shorter = [index + 1 for index, item in enumerate(items) if item is sentinel]
            raise ValueError(f"strict_zip() argument(s) {shorter} shorter than the others")
        yield tuple(items)
