"""The seam's hardware branch, on any machine: emulation off and a stand-in SDK installed (``standin_sdk/``).

On Gaudi the seam hands out the installed ``habana_frameworks``, tensors live on ``hpu``, mixed precision is
``torch.autocast("hpu")`` with the operator lists handed to the SDK through its environment variables, and
availability comes from the device files. None of that runs on the emulator, so without these tests a break there
would only show on hardware.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch.profiler import ProfilerActivity

import lightning_accel.habana.availability as availability_module
from lightning_accel.core.emulation import follow_emulated_sdk_names, reset_emulation_settings
from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUAccelerator, _lazy, sdk

# Reads the emulator's internals (or stands in for the SDK): not a test of real hardware.
pytestmark = pytest.mark.emulator_only

STANDIN = Path(__file__).parent / "standin_sdk"
LIST_VARIABLES = ("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST", "PT_HPU_AUTOCAST_FP32_OPS_LIST")


def _sdk_modules() -> dict[str, ModuleType]:
    return {name: module for name, module in sys.modules.items() if name.split(".")[0] == sdk.SDK_PACKAGE}


@pytest.fixture
def installed_sdk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Emulation off and the stand-in SDK importable as ``habana_frameworks`` (not imported yet)."""
    emulated = _sdk_modules()  # the emulator's modules under the SDK's names, if this process loaded them
    for name in emulated:
        del sys.modules[name]
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "0")
    monkeypatch.syspath_prepend(str(STANDIN))
    reset_emulation_settings()
    follow_emulated_sdk_names()
    try:
        import habana_frameworks.torch as standin

        assert Path(standin.__file__).is_relative_to(STANDIN), standin.__file__
        # Imported for the check above only: the SDK counts as "not imported yet" until the seam imports it.
        for name in _sdk_modules():
            del sys.modules[name]
        yield
    finally:
        for name in _sdk_modules():
            del sys.modules[name]
        monkeypatch.undo()
        sys.modules.update(emulated)
        reset_emulation_settings()
        follow_emulated_sdk_names()


def test_the_seam_hands_out_the_installed_sdk(installed_sdk: None) -> None:
    assert sdk.is_emulated() is False
    assert sdk.is_sdk_installed() is True
    sdk.require()
    for module in (sdk.htcore, sdk.hpu, sdk.hccl, sdk.ht):
        assert Path(module.__file__).is_relative_to(STANDIN), module.__file__
    assert sdk.hccl.imported is True  # importing hccl is what registers the backend on Gaudi
    assert sdk.distributed_backend() == "hccl"


def test_tensors_live_on_hpu_and_host_devices_are_refused(installed_sdk: None) -> None:
    assert sdk.device_type() == "hpu"
    assert sdk.device() == torch.device("hpu")
    # Every process sees its own card as "hpu": an index names the card, not a torch device index.
    assert sdk.to_device("hpu:1") == sdk.to_device(1) == sdk.to_device(torch.device("hpu")) == torch.device("hpu")
    with pytest.raises(ConfigurationError) as info:
        sdk.to_device("cpu")
    assert str(info.value) == (
        "device='cpu' is not an HPU. Accepted: 'hpu', 'hpu:N', torch.device('hpu') or an index. Use accelerator='cpu' "
        "or 'cuda' to train on another device."
    )


def test_autocast_is_torch_autocast_on_hpu_and_list_files_are_handed_to_the_sdk_before_it_loads(
    installed_sdk: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for variable in LIST_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    lower, fp32 = tmp_path / "lower.txt", tmp_path / "fp32.txt"
    lower.write_text("linear\nmatmul\n")
    fp32.write_text("softmax\n")
    sdk._export_autocast_lists(lower, fp32)  # the plugin's constructor, before the SDK loads
    assert [os.environ[variable] for variable in LIST_VARIABLES] == [str(lower.resolve()), str(fp32.resolve())]
    assert _sdk_modules() == {}
    context = sdk.autocast(torch.bfloat16)
    assert isinstance(context, torch.autocast)
    assert (context.device, context.fast_dtype, context._enabled) == ("hpu", torch.bfloat16, True)


def test_lists_given_after_the_sdk_loaded_are_refused_with_the_export_lines(
    installed_sdk: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for variable in LIST_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    lower = tmp_path / "lower.txt"
    lower.write_text("linear\n")
    sdk.htcore.mark_step()  # any use of the SDK imports it; it reads the list variables only then
    with pytest.raises(ConfigurationError, match=re.escape(f"export {LIST_VARIABLES[0]}={lower.resolve()}\n")):
        sdk._export_autocast_lists(lower, None)
    assert not any(variable in os.environ for variable in LIST_VARIABLES)


def test_casts_are_disabled_with_torch_autocast_and_the_profiler_records_hpu(installed_sdk: None) -> None:
    context = sdk.disable_casts()
    assert isinstance(context, torch.autocast)
    assert (context.device, context._enabled) == ("hpu", False)
    assert sdk.profiler_activities() == [ProfilerActivity.CPU, ProfilerActivity.HPU]


def test_the_accelerator_asks_the_installed_sdk(installed_sdk: None) -> None:
    assert HPUAccelerator.is_available() is True
    assert HPUAccelerator.auto_device_count() == 2
    assert HPUAccelerator.get_device_name() == "GAUDI3"
    assert HPUAccelerator.parse_devices("auto") == 2
    assert HPUAccelerator.get_parallel_devices(2) == [torch.device("hpu")] * 2
    with pytest.raises(ConfigurationError, match=r"devices=3 asks for 3 HPUs, but only 2 are visible"):
        HPUAccelerator.parse_devices(3)
    assert HPUAccelerator().get_device_stats(torch.device("hpu")) == sdk.hpu.STATS
    assert sdk.hpu.stats_asked_for == [torch.device("hpu")]


def test_the_strategies_mark_steps_on_the_installed_sdk(installed_sdk: None) -> None:
    _lazy.mark_step()
    _lazy.mark_step()
    assert sdk.htcore.marked == [False, False]


@pytest.mark.parametrize(
    ("files", "visible", "state", "devices"),
    [
        (["accel0", "accel1"], None, "hardware", 2),
        (["accel0", "accel1"], "1", "hardware", 1),
        ([], None, "unavailable", 0),
    ],
    ids=["two-cards", "one-visible", "no-card"],
)
def test_availability_counts_the_device_files(
    installed_sdk: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    files: list[str],
    visible: str | None,
    state: str,
    devices: int,
) -> None:
    for name in files:
        (tmp_path / name).touch()
    monkeypatch.setattr(availability_module, "_DEVICE_GLOBS", (str(tmp_path / "accel[0-9]*"),))
    if visible is None:
        monkeypatch.delenv("HABANA_VISIBLE_MODULES", raising=False)
    else:
        monkeypatch.setenv("HABANA_VISIBLE_MODULES", visible)
    found = availability_module.availability()
    assert (found.state, found.devices) == (state, devices)
    if state == "unavailable":
        assert "installed but no Gaudi device is visible" in found.reason
