"""The IPU self-test checks' code (declared in :mod:`lightning_accel.graphcore.selftest`)."""

from __future__ import annotations

__all__: list[str] = []
