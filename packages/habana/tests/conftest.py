"""Run the Habana suite on the SDK emulator unless real Gaudi hardware is present."""

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
