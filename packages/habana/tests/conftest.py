"""Run the Habana suite on the SDK emulator by default.

On a Gaudi machine, ``LIGHTNING_ACCEL_EMULATE=0 nox -s hpu_tests`` runs it against the real SDK instead (the suite
has not been run on hardware yet; tests that read emulator internals would then need a marker).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Set before anything reads the emulation settings.
os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "hpu")
os.environ.setdefault("LIGHTNING_ACCEL_EMULATED_DEVICES", "8")

from lightning_accel.core.emulation import reset_emulation_settings


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Let a test change the environment; the emulation settings are re-read before and after."""
    reset_emulation_settings()
    yield monkeypatch
    monkeypatch.undo()
    reset_emulation_settings()
