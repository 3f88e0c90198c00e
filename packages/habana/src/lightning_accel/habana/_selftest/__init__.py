"""The Gaudi self-test checks' code (declared in :mod:`lightning_accel.habana.selftest`) and their data files."""

__all__: list[str] = []
