"""``nox -s hpu_tests`` on a simulated Gaudi machine: the session picks the SDK's interpreter, installs no torch, and
turns emulation off; elsewhere it runs on the emulator as before (tools/vendor_sdk.py decides; no nested nox)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import vendor_sdk  # noqa: E402

STANDIN_SDK = ROOT / "packages" / "habana" / "tests" / "standin_sdk"


def _interpreter(folder: Path, name: str, sdk: Path | None) -> Path:
    """A ``python3`` on a PATH folder: this test's Python, with the stand-in SDK importable when ``sdk`` is given."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    pythonpath = f'PYTHONPATH="{sdk}" ' if sdk is not None else ""
    script.write_text(f'#!/bin/sh\n{pythonpath}exec "{sys.executable}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _environ(path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_ACCEL_") and k != "PYTHONPATH"}
    return {**base, "PATH": str(path), **extra}


@pytest.fixture
def gaudi_machine(tmp_path: Path) -> Path:
    """A PATH whose python3 imports habana_frameworks (the stand-in: two Gaudi 3 cards)."""
    folder = tmp_path / "gaudi-bin"
    _interpreter(folder, "python3", STANDIN_SDK)
    return folder


def test_on_a_gaudi_machine_the_session_uses_the_sdk_interpreter_and_its_torch(gaudi_machine: Path) -> None:
    plan = vendor_sdk.plan_session("hpu", _environ(gaudi_machine))
    assert plan.hardware
    assert plan.python == str(gaudi_machine / "python3")
    assert plan.venv_params == ("--system-site-packages",)
    import torch

    # Nothing installs torch: the packages are installed under a constraint that keeps the SDK's torch.
    assert plan.torch is None
    assert plan.constraints == (f"torch=={torch.__version__}",)
    commands = plan.install_commands("lightning==2.6.6", "-e", "packages/core", "-e", "packages/habana")
    assert commands == [["-c", "{constraints}", "lightning==2.6.6", "-e", "packages/core", "-e", "packages/habana"]]
    assert not any(arg.startswith("torch") for command in commands for arg in command)
    # Emulation off, the SDK's device count, both execution modes of the bridge.
    assert plan.runs == (
        {"LIGHTNING_ACCEL_EMULATE": "0", "LIGHTNING_ACCEL_SDK_DEVICES": "2", "PT_HPU_LAZY_MODE": "0"},
        {"LIGHTNING_ACCEL_EMULATE": "0", "LIGHTNING_ACCEL_SDK_DEVICES": "2", "PT_HPU_LAZY_MODE": "1"},
    )
    assert "habana_frameworks.torch" in plan.reason and "2 device(s)" in plan.reason


def test_the_ipu_session_on_that_machine_stays_on_the_emulator(gaudi_machine: Path) -> None:
    plan = vendor_sdk.plan_session("ipu", _environ(gaudi_machine))
    emulated = ({"LIGHTNING_ACCEL_EMULATE": "ipu"},)
    assert (plan.hardware, plan.python, plan.torch, plan.runs) == (False, "3.11", "torch==2.13.0", emulated)
    assert plan.reason == "no interpreter imports poptorch: on the emulator"


def test_without_the_sdk_the_session_is_the_emulator_one(tmp_path: Path) -> None:
    folder = tmp_path / "plain-bin"
    _interpreter(folder, "python3", None)
    plan = vendor_sdk.plan_session("hpu", _environ(folder))
    assert (plan.hardware, plan.python, plan.venv_params, plan.torch) == (False, "3.11", (), "torch==2.13.0")
    assert plan.runs == ({"LIGHTNING_ACCEL_EMULATE": "hpu"},)
    assert plan.install_commands("-e", "packages/core") == [["torch==2.13.0"], ["-e", "packages/core"]]


def test_an_explicit_emulation_request_wins_over_the_sdk(gaudi_machine: Path) -> None:
    plan = vendor_sdk.plan_session("hpu", _environ(gaudi_machine, LIGHTNING_ACCEL_EMULATE="hpu"))
    assert not plan.hardware and plan.runs == ({"LIGHTNING_ACCEL_EMULATE": "hpu"},)
    assert plan.reason == "LIGHTNING_ACCEL_EMULATE='hpu': on the emulator, as asked"


def test_the_sdk_python_variable_names_the_interpreter(tmp_path: Path, gaudi_machine: Path) -> None:
    plain = tmp_path / "plain-bin"
    _interpreter(plain, "python3", None)
    sdk_python = gaudi_machine / "python3"
    plan = vendor_sdk.plan_session("hpu", _environ(plain, LIGHTNING_ACCEL_SDK_PYTHON=str(sdk_python)))
    assert plan.hardware and plan.python == str(sdk_python)


def test_an_sdk_python_without_any_sdk_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    plain = _interpreter(tmp_path / "plain-bin", "python3", None)
    with pytest.raises(ValueError, match=r"LIGHTNING_ACCEL_SDK_PYTHON='.*python3' imports no vendor SDK"):
        vendor_sdk.plan_session("hpu", _environ(tmp_path, LIGHTNING_ACCEL_SDK_PYTHON=str(plain)))


def test_an_sdk_torch_older_than_2_1_gets_the_lightning_that_supports_it() -> None:
    # The last poptorch ships torch 2.0.1; Lightning 2.3 is the newest that runs on it.
    assert vendor_sdk._lightning_for("2.0.1+cpu") == "lightning==2.3.3"
    assert vendor_sdk._lightning_for("2.6.0+hpu.synapse.v1.21.0") is None


def test_on_an_ipu_machine_the_ipu_session_counts_the_ipus_poptorch_can_attach(tmp_path: Path) -> None:
    sdk = tmp_path / "poptorch_sdk"
    sdk.mkdir()
    # A stand-in poptorch on a machine with 4 IPUs: attaching 1, 2 or 4 works, 8 does not.
    (sdk / "poptorch.py").write_text("def ipuHardwareIsAvailable(num_ipus=1):\n    return num_ipus <= 4\n")
    folder = tmp_path / "ipu-bin"
    _interpreter(folder, "python3", sdk)
    plan = vendor_sdk.plan_session("ipu", _environ(folder))
    assert plan.hardware and plan.python == str(folder / "python3") and plan.torch is None
    assert plan.runs == ({"LIGHTNING_ACCEL_EMULATE": "0", "LIGHTNING_ACCEL_SDK_DEVICES": "4"},)
