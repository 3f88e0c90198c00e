"""What only a Gaudi machine can show (``hardware``: skipped on the emulator, run by ``nox -s hpu_tests`` there)."""

from __future__ import annotations

import os

import pytest

from lightning_accel.habana import sdk
from lightning_accel.habana.availability import availability


@pytest.mark.hardware
def test_the_real_sdk_answers_with_the_devices_nox_found() -> None:
    state = availability()
    assert state.state == "hardware", state.reason
    assert not sdk.is_emulated()
    # Set by the hpu_tests session from habana_frameworks.torch.hpu.device_count().
    expected = os.environ.get("LIGHTNING_ACCEL_SDK_DEVICES")
    if expected is not None:
        assert state.devices == int(expected)
    assert "emulated" not in sdk.hpu.get_device_name()
