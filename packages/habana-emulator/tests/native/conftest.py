"""Each test of the C++ device runs a script in a fresh process: loading a device into torch cannot be undone, and
the worker's own process has the emulated SDK loaded (``LIGHTNING_ACCEL_EMULATE=hpu`` in the parent conftest), while
these tests check the device alone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from native_helpers import environment, run_script


@pytest.fixture(scope="session")
def built_device() -> None:
    """Builds the device once (or finds it in the cache) before the first test that needs it."""
    run_script("report(ok=True)")


@pytest.fixture
def on_device(built_device: None):
    """Runs a script on the C++ device and returns what it reported with ``report(...)``."""

    def run(code: str) -> dict[str, Any]:
        out = run_script(code).stdout.strip().splitlines()
        return json.loads(out[-1])

    return run


@pytest.fixture
def device_env() -> dict[str, str]:
    return environment()
