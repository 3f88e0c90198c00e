"""The plugin spec and availability: cheap to load, and honest about hardware, emulation and neither."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lightning_accel.core.emulation import reset_emulation_settings
from lightning_accel.core.plugin import PluginSpec
from lightning_accel.graphcore.availability import availability
from lightning_accel.graphcore.plugin import PLUGIN


def _run(code: str, **env: str) -> str:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LIGHTNING_ACCEL")}
    environment.update(env)
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def test_spec_names_the_classes() -> None:
    assert isinstance(PLUGIN, PluginSpec)
    assert PLUGIN.name == "graphcore" and PLUGIN.emulates == ("ipu",)
    ipu = PLUGIN.accelerator("ipu")
    assert ipu is not None and ipu.single_strategy == ipu.parallel_strategy == "ipu_strategy"
    assert set(PLUGIN.precision) == {"32-true", "16-mixed", "16-true"}


def test_loading_the_spec_imports_neither_torch_nor_lightning() -> None:
    code = (
        "import sys, lightning_accel.graphcore.plugin as p; p.PLUGIN.check_availability(); "
        "print(sorted(m for m in ('torch', 'lightning', 'poptorch') if m in sys.modules))"
    )
    assert _run(code, LIGHTNING_ACCEL_AUTOLOAD="0") == "[]"


def test_availability_states(monkeypatch: pytest.MonkeyPatch) -> None:
    state = availability()
    assert (state.state, state.devices) == ("emulated", 8)
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "0")
    reset_emulation_settings()
    state = availability()
    assert state.state == "unavailable" and "LIGHTNING_ACCEL_EMULATE=ipu" in state.reason
