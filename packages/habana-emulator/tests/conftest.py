"""The emulator's own tests: they run on the emulated SDK, whatever the machine has.

The emulated SDK is reached by the SDK's own module names (``habana_frameworks.torch...``, as a user's script does)
or, for its internals, as ``lightning_accel.habana_emulator``; never through lightning-accel-habana. Tests marked
``emulator_only`` (they read the emulator's internals) are skipped when ``LIGHTNING_ACCEL_EMULATE`` is set to
something without ``hpu``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Set before anything reads the emulation settings.
os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "hpu")
os.environ.setdefault("LIGHTNING_ACCEL_EMULATED_DEVICES", "8")

# The OpInfo suite's pass rates, printed at the end of the session (also by the xdist controller).
from _opinfo_report import pytest_runtest_logreport, pytest_terminal_summary  # noqa: F401

from lightning_accel.core.emulation import emulation_settings, follow_emulated_sdk_names, reset_emulation_settings
from lightning_accel.core.testing.markers import skip_by_emulation

reset_emulation_settings()
# `import habana_frameworks.torch...` resolves to the emulator from here on (the SDK's names, as in a user's script).
follow_emulated_sdk_names()
# Decided once, from the session's setting, before any test changes the environment.
_SESSION_EMULATED = emulation_settings().emulates("hpu")


def pytest_runtest_setup(item: pytest.Item) -> None:
    skip_by_emulation(item, "hpu", emulated=_SESSION_EMULATED)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Let a test change the environment; the emulation settings are re-read before and after."""
    reset_emulation_settings()
    yield monkeypatch
    monkeypatch.undo()
    reset_emulation_settings()


def _switch_mode(lazy: bool) -> bool:
    """Load the emulated SDK in the other mode; returns the mode it had."""
    from lightning_accel.habana_emulator import core as emulated_core

    before = emulated_core.is_lazy()
    emulated_core._load_mode(lazy)
    return before


def _mode_fixture(lazy: bool) -> Iterator[None]:
    before = _switch_mode(lazy)
    try:
        yield
    finally:
        _switch_mode(before)


@pytest.fixture
def lazy_mode() -> Iterator[None]:
    """The SDK in lazy mode (``PT_HPU_LAZY_MODE=1``): mark_step builds graphs, HPU graphs can be captured."""
    yield from _mode_fixture(True)


@pytest.fixture
def eager_mode() -> Iterator[None]:
    """The SDK in eager mode (``PT_HPU_LAZY_MODE=0``, the default since 1.21): torch.compile; HPU graphs refused."""
    yield from _mode_fixture(False)


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    # An in-process test that sets up a rank or a card leaves its variables behind (the SDK's set_device writes
    # HLS_MODULE_ID); the processes of later tests in this worker must not inherit them.
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
