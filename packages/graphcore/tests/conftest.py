"""Every Graphcore test runs on the poptorch emulator with 8 emulated IPUs."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from types import ModuleType

import pytest

os.environ["LIGHTNING_ACCEL_EMULATE"] = "ipu"
os.environ.pop("LIGHTNING_ACCEL_EMULATED_DEVICES", None)
os.environ.pop("POPLAR_ENGINE_OPTIONS", None)

from lightning_accel.core.emulation import reset_emulation_settings

reset_emulation_settings()


@pytest.fixture(autouse=True)
def _emulated_ipus(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "ipu")
    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS", raising=False)
    reset_emulation_settings()
    yield
    # Executors a test left attached hold emulated IPUs until they are collected.
    gc.collect()
    reset_emulation_settings()


@pytest.fixture
def poptorch() -> ModuleType:
    from lightning_accel.graphcore.sdk import poptorch

    return poptorch()


@pytest.fixture
def emulated_ipus(monkeypatch: pytest.MonkeyPatch) -> object:
    """Call with a count to change the size of the emulated IPU system for one test."""

    def set_count(count: int) -> None:
        monkeypatch.setenv("LIGHTNING_ACCEL_EMULATED_DEVICES", str(count))
        reset_emulation_settings()

    return set_count
