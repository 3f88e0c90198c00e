"""The IPU self-test checks' code (declared in :mod:`lightning_accel.graphcore.selftest`)."""

__all__: list[str] = []
