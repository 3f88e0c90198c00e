"""Run the Habana suite on the SDK emulator unless ``LIGHTNING_ACCEL_EMULATE`` is set explicitly.

On a Gaudi machine ``nox -s hpu_tests`` sets it to ``0`` and runs the suite on the real SDK, once per
``PT_HPU_LAZY_MODE`` value: tests marked ``emulator_only`` (they read the emulator's internals) are then skipped, and
tests marked ``hardware`` run only then.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Set before anything reads the emulation settings.
os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "hpu")
os.environ.setdefault("LIGHTNING_ACCEL_EMULATED_DEVICES", "8")

from lightning_accel.core.emulation import emulation_settings, reset_emulation_settings
from lightning_accel.core.testing.markers import skip_by_emulation

reset_emulation_settings()
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


def _switch_emulated_mode(lazy: bool) -> bool:
    """On the emulator, load the SDK in the other mode; returns the mode it had. Emulator only."""
    from lightning_accel.habana_emulator import core as emulated_core

    before = emulated_core.is_lazy()
    emulated_core._load_mode(lazy)
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
    """The SDK in lazy mode (``PT_HPU_LAZY_MODE=1``): mark_step builds graphs, HPU graphs can be captured."""
    yield from _mode_fixture(True)


@pytest.fixture
def eager_mode() -> Iterator[None]:
    """The SDK in eager mode (``PT_HPU_LAZY_MODE=0``, the default since 1.21): torch.compile; HPU graphs refused."""
    yield from _mode_fixture(False)


@pytest.fixture(autouse=True)
def _rank_zero_restored() -> Iterator[None]:
    # Lightning records a strategy's global rank in a process-wide `rank_zero_only.rank`; an in-process test that sets
    # up a rank other than 0 must not leave later tests' rank-zero warnings silenced.
    from lightning_utilities.core.rank_zero import rank_zero_only

    rank = getattr(rank_zero_only, "rank", 0)
    yield
    rank_zero_only.rank = rank  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    # An in-process test that sets up a rank or a card leaves its variables behind (the SDK's set_device writes
    # HLS_MODULE_ID, Lightning's environments RANK and LOCAL_RANK); the processes of later tests in this worker must
    # not inherit them (CI saw two DDP ranks both given module 3 this way).
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
