"""The DeepSpeed-on-HPU self-test checks' code (declared in :mod:`lightning_accel.deepspeed_hpu.selftest`)."""

__all__: list[str] = []
