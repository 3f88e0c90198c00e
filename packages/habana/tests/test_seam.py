"""The SDK seam, the plugin spec and the import-time promises."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from _habana_helpers import PYTHON, script_env

from lightning_accel.core.emulation import follow_emulated_sdk_names, reset_emulation_settings
from lightning_accel.core.errors import DeviceUnavailableError
from lightning_accel.habana import HPUAccelerator, sdk
from lightning_accel.habana.availability import availability
from lightning_accel.habana.plugin import PLUGIN

UNAVAILABLE = (
    "The Habana SDK (habana-torch-plugin, import name 'habana_frameworks') is missing, so HPUs cannot be used in this "
    "process. Install the Gaudi software stack on a Gaudi machine, or set the environment variable "
    "LIGHTNING_ACCEL_EMULATE=hpu to run on the software emulator (backed by the CPU; it needs a CPU-only build of "
    "torch)."
)


@pytest.fixture
def without_sdk(clean_env: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Emulation off, and no SDK importable, as on a machine without the Gaudi software stack (even on one with it)."""
    clean_env.setenv("LIGHTNING_ACCEL_EMULATE", "0")
    reset_emulation_settings()
    follow_emulated_sdk_names()  # the emulator's modules leave the SDK's names
    loaded = {name: module for name, module in sys.modules.items() if name.split(".")[0] == sdk.SDK_PACKAGE}
    for name in loaded:
        del sys.modules[name]
    clean_env.setitem(sys.modules, sdk.SDK_PACKAGE, None)  # None in sys.modules: not importable, not found
    try:
        yield clean_env
    finally:
        clean_env.undo()
        sys.modules.update(loaded)
        reset_emulation_settings()
        follow_emulated_sdk_names()


def test_without_sdk_and_emulation_the_error_says_how_to_enable_the_emulator(without_sdk: pytest.MonkeyPatch) -> None:
    assert sdk.is_sdk_installed() is False
    with pytest.raises(DeviceUnavailableError) as info:
        sdk.require()
    assert str(info.value) == UNAVAILABLE
    with pytest.raises(DeviceUnavailableError, match="LIGHTNING_ACCEL_EMULATE=hpu"):
        HPUAccelerator()
    with pytest.raises(DeviceUnavailableError, match="LIGHTNING_ACCEL_EMULATE=hpu"):
        sdk.htcore.mark_step()
    assert HPUAccelerator.is_available() is False
    assert HPUAccelerator.auto_device_count() == 0
    state = availability()
    assert state.state == "unavailable"
    assert "LIGHTNING_ACCEL_EMULATE=hpu" in state.reason


def test_trainer_without_sdk_and_emulation_fails_with_the_fix(without_sdk: pytest.MonkeyPatch) -> None:
    from lightning.pytorch import Trainer

    with pytest.raises(DeviceUnavailableError, match="set the environment variable LIGHTNING_ACCEL_EMULATE=hpu"):
        Trainer(accelerator=HPUAccelerator(), devices=1)


def test_emulated_availability(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LIGHTNING_ACCEL_EMULATED_DEVICES", "3")
    state = availability()
    assert (state.state, state.devices) == ("emulated", 3)
    assert PLUGIN.check_availability() == state


def test_seam_reports_what_differs() -> None:
    assert sdk.is_emulated()
    assert sdk.distributed_backend() == "hccl"
    # As on Gaudi: one HPU per process, known to torch as "hpu" whatever module it is.
    assert sdk.device_type() == "hpu"
    assert str(sdk.device()) == "hpu"
    assert str(sdk.to_device("hpu")) == "hpu"
    assert str(sdk.to_device("hpu:1")) == "hpu"
    assert torch.randn(2, device=sdk.device()).device.type == "hpu"
    with pytest.raises(ValueError, match=r"device='mps' is not an HPU. Accepted: 'hpu', 'hpu:N'"):
        sdk.to_device("mps")
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        sdk.nope  # noqa: B018


def _run(code: str, **env: str) -> str:
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=script_env(**env), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("emulate", ["all", "0"])
def test_plugin_spec_imports_neither_torch_nor_lightning_nor_the_sdk(emulate: str) -> None:
    # "all" and "0" need no plugin discovery, so other vendors' plugins are not loaded into the probe.
    out = _run(
        "import sys; from lightning_accel.habana.plugin import PLUGIN; "
        "from lightning_accel.habana.availability import availability; print(availability().state); "
        "print(sorted(m for m in ('torch', 'lightning', 'habana_frameworks') if m in sys.modules))",
        LIGHTNING_ACCEL_EMULATE=emulate,
    )
    assert out.splitlines()[-1] == "[]"
    assert PLUGIN.name == "habana"
    assert {s.name for s in PLUGIN.strategies} == {
        "hpu_single",
        "hpu_parallel",
        "hpu_ddp",
        "hpu_fast_ddp",
        "hpu_fsdp",
        "hpu_model_parallel",
    }


def test_importing_the_package_loads_no_sdk_and_no_emulator() -> None:
    out = _run(
        "import sys, lightning_accel.habana; "
        "print([m for m in sys.modules if m.startswith(('habana_frameworks', 'lightning_accel.habana_emulator'))])"
    )
    assert out == "[]"


def test_a_broken_sdk_is_named_in_the_devices_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_accel.habana import HPUAccelerator, _devices

    def broken() -> None:
        raise OSError("libSynapse.so: cannot open shared object file")

    monkeypatch.setattr(sdk, "hpu_module", broken)
    assert HPUAccelerator.is_available() is False
    with pytest.raises(ValueError) as info:
        HPUAccelerator.parse_devices(1)
    assert str(info.value) == (
        "devices=1 asks for 1 HPUs, but no HPU can be used in this process: the Habana SDK could not be loaded: "
        "OSError: libSynapse.so: cannot open shared object file. Fix the Gaudi software stack, or set "
        "LIGHTNING_ACCEL_EMULATE=hpu to use the emulator."
    )
    monkeypatch.undo()
    assert _devices.hpu_available() and _devices._unavailable_because is None


@pytest.mark.emulator_only
def test_emulation_without_the_emulator_installed_names_the_extra() -> None:
    # lightning-accel-habana without its [emulator] extra: no distribution declares habana_frameworks.torch.
    out = _run(
        "import _lightning_accel_sdk_aliases as aliases\n"
        "aliases._cache, aliases._read_entry_points = None, lambda tokens: {}\n"
        "from lightning_accel.habana import sdk, HPUAccelerator\n"
        "from lightning_accel.habana.availability import availability\n"
        "from lightning_accel.core.errors import DeviceUnavailableError\n"
        "state = availability(); print(state.state); print(state.reason == sdk.EMULATOR_MISSING)\n"
        "try:\n    HPUAccelerator()\nexcept DeviceUnavailableError as exc:\n    print(exc)\n",
        LIGHTNING_ACCEL_EMULATE="hpu",
        LIGHTNING_ACCEL_AUTOLOAD="0",
    )
    state, same, error = out.splitlines()[-3:]
    assert (state, same) == ("unavailable", "True")
    assert "pip install 'lightning-accel-habana[emulator]'" in error
    assert "lightning-accel-habana-emulator" in error


def _imported_modules(package_dir: Path) -> dict[str, list[str]]:
    """Module name -> the files under ``package_dir`` that import it (absolute imports and import_module strings)."""
    found: dict[str, list[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("lightning_"):
                names = [node.value]
            for name in names:
                found.setdefault(name, []).append(path.name)
    return found


def test_the_integration_never_imports_the_emulator() -> None:
    # The emulator (lightning-accel-habana-emulator) is reached only by the SDK's own module names, as the real SDK.
    import lightning_accel.habana

    imported = _imported_modules(Path(lightning_accel.habana.__file__).parent)
    assert not {name: files for name, files in imported.items() if name.startswith("lightning_accel.habana_emulator")}
