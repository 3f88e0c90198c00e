"""The vendor suites' two markers, applied the same way by every vendor's conftest.

``emulator_only``: the test reads the emulator's internals, so it is skipped when the vendor SDK runs.
``hardware``: the test needs the vendor's hardware and SDK, so it is skipped on the emulator.
(Both are declared in the repository's pytest configuration.)

Example:
    .. code-block:: python

        # conftest.py of a vendor suite
        from lightning_accel.core.emulation import emulation_settings
        from lightning_accel.core.testing.markers import skip_by_emulation

        EMULATED = emulation_settings().emulates("hpu")  # decided once, before tests change the environment


        def pytest_runtest_setup(item):
            skip_by_emulation(item, "hpu", emulated=EMULATED)
"""

from __future__ import annotations

import pytest

from lightning_accel.core.emulation import EMULATE_VAR

__all__ = ["skip_by_emulation"]


def skip_by_emulation(item: pytest.Item, device_type: str, emulated: bool) -> None:
    """Skip ``item`` when its marker does not fit the session (emulated or on the vendor SDK), saying why."""
    if emulated and item.get_closest_marker("hardware") is not None:
        pytest.skip(f"needs {device_type.upper()} hardware and its SDK; this session emulates it ({EMULATE_VAR})")
    if not emulated and item.get_closest_marker("emulator_only") is not None:
        pytest.skip(f"reads the {device_type.upper()} emulator's internals; runs only with {EMULATE_VAR}={device_type}")
