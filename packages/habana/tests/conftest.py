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


def _switch_emulated_mode(lazy: bool) -> bool:
    """On the emulator, load the SDK in the other mode; returns the mode it had. Emulator only."""
    from lightning_accel.habana._emulator import core as emulated_core

    before = emulated_core.is_lazy()
    emulated_core.load_mode(lazy)
    return before


def _mode_fixture(lazy: bool) -> Iterator[None]:
    from lightning_accel.habana import sdk

    if not sdk.is_emulated():
        # A real SDK has one mode per process, chosen by PT_HPU_LAZY_MODE at start: nox runs the suite in both.
        if bool(sdk.htcore.is_lazy()) is not lazy:
            pytest.skip(f"needs PT_HPU_LAZY_MODE={int(lazy)} when the SDK loads")
        yield
        return
    before = _switch_emulated_mode(lazy)
    try:
        yield
    finally:
        _switch_emulated_mode(before)


@pytest.fixture
def lazy_mode() -> Iterator[None]:
    """The SDK in lazy mode (``PT_HPU_LAZY_MODE=1``): mark_step builds graphs, the HPU graph APIs are exported."""
    yield from _mode_fixture(True)


@pytest.fixture
def eager_mode() -> Iterator[None]:
    """The SDK in eager mode (``PT_HPU_LAZY_MODE=0``, the default since 1.21): torch.compile, no graph APIs."""
    yield from _mode_fixture(False)
