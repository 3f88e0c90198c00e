"""What only an IPU machine can show (``hardware``: skipped on the emulator, run by ``nox -s ipu_tests`` there)."""

from __future__ import annotations

import os

import pytest

from lightning_accel.graphcore.availability import availability


@pytest.mark.hardware
def test_real_poptorch_answers_with_the_ipus_nox_found() -> None:
    state = availability()
    assert state.state == "hardware", state.reason
    # Set by the ipu_tests session from poptorch.ipuHardwareIpuCount().
    expected = os.environ.get("LIGHTNING_ACCEL_SDK_DEVICES")
    if expected is not None:
        assert state.devices == int(expected)
