"""The Graphcore tests run on the poptorch emulator with 8 emulated IPUs, unless ``LIGHTNING_ACCEL_EMULATE`` is set.

On an IPU machine ``nox -s ipu_tests`` sets it to ``0`` and the suite runs on poptorch; tests marked ``emulator_only``
are then skipped, and tests marked ``hardware`` run only then.
"""

from __future__ import annotations

import gc
import os
import random
from collections.abc import Iterator
from types import ModuleType

import pytest

# An explicit setting decides (the vendor session sets 0); otherwise the emulator.
os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "ipu")
os.environ.pop("LIGHTNING_ACCEL_EMULATED_DEVICES", None)
os.environ.pop("POPLAR_ENGINE_OPTIONS", None)

import torch

from lightning_accel.core.emulation import emulation_settings, follow_emulated_sdk_names, reset_emulation_settings
from lightning_accel.core.testing.markers import skip_by_emulation

SESSION_EMULATE = os.environ["LIGHTNING_ACCEL_EMULATE"]
reset_emulation_settings()
_SESSION_EMULATED = emulation_settings().emulates("ipu")
# `import poptorch` in the test modules (as in the user guide) follows the setting made above, after start-up.
follow_emulated_sdk_names()


def pytest_runtest_setup(item: pytest.Item) -> None:
    skip_by_emulation(item, "ipu", emulated=_SESSION_EMULATED)


@pytest.fixture(autouse=True)
def _emulated_ipus(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Every test starts from the same random state, whatever ran before it on this worker: a model's initial weights
    # and a shuffled loader's order must not depend on the order pytest-xdist happens to give the tests.
    random.seed(0)
    torch.manual_seed(0)
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", SESSION_EMULATE)
    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS", raising=False)
    reset_emulation_settings()
    yield
    # Executors a test left attached hold emulated IPUs until they are collected.
    gc.collect()
    reset_emulation_settings()


@pytest.fixture
def poptorch() -> ModuleType:
    from lightning_accel.graphcore.sdk import poptorch_module

    return poptorch_module()


@pytest.fixture
def emulated_ipus(monkeypatch: pytest.MonkeyPatch) -> object:
    """Call with a count to change the size of the emulated IPU system for one test."""

    def set_count(count: int) -> None:
        monkeypatch.setenv("LIGHTNING_ACCEL_EMULATED_DEVICES", str(count))
        reset_emulation_settings()

    return set_count
