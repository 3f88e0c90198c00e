"""The emulator answers to the SDK's own module names, exactly when emulation is asked for; eager/lazy contract."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from _habana_helpers import PYTHON, digits_classifier, digits_loaders, script_env
from lightning.pytorch import Trainer

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUGraphs

# Reads the emulator's internals (or stands in for the SDK): not a test of real hardware.
pytestmark = pytest.mark.emulator_only


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-c", code], env=script_env(**env), capture_output=True, text=True, timeout=180)


def test_user_code_imports_the_sdk_by_its_real_names() -> None:
    done = _python(
        "import habana_frameworks.torch.core as htcore\n"
        "import habana_frameworks.torch.hpu as hthpu\n"
        "import habana_frameworks.torch.distributed.hccl\n"
        "from habana_frameworks.torch.hpu import get_device_name\n"
        "import sys\n"
        "htcore.mark_step()\n"
        "assert htcore.hpu is hthpu, 'one module object under both names'\n"
        "assert sys.modules['habana_frameworks.torch.core'] is sys.modules['lightning_accel.habana_emulator.core']\n"
        "print(get_device_name(), hthpu.device_count())\n",
        LIGHTNING_ACCEL_EMULATED_DEVICES="4",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[0] == "GAUDI2 (emulated) 4"


def test_without_emulation_the_names_are_missing_as_without_the_sdk() -> None:
    done = _python(
        "import importlib.util\n"
        "assert importlib.util.find_spec('habana_frameworks') is None\n"
        "import habana_frameworks.torch.core\n",
        LIGHTNING_ACCEL_EMULATE="0",
    )
    assert done.returncode != 0
    assert "ModuleNotFoundError: No module named 'habana_frameworks'" in done.stderr


def test_switching_emulation_off_in_process_forgets_the_names() -> None:
    done = _python(
        "import os, importlib.util\n"
        "import habana_frameworks.torch.core\n"
        "from lightning_accel.core.emulation import follow_emulated_sdk_names, reset_emulation_settings\n"
        "os.environ['LIGHTNING_ACCEL_EMULATE'] = '0'; reset_emulation_settings(); follow_emulated_sdk_names()\n"
        "assert importlib.util.find_spec('habana_frameworks') is None\n"
        "from lightning_accel.habana import HPUAccelerator\n"
        "assert HPUAccelerator.is_available() is False\n"
        "print('ok')\n"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_an_explicit_request_to_emulate_wins_over_an_installed_sdk(tmp_path: Path) -> None:
    fake = tmp_path / "habana_frameworks" / "torch"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("WHO = 'installed SDK'\n")
    code = "import habana_frameworks.torch as ht\nprint(getattr(ht, 'WHO', 'emulator'))\n"
    emulated = _python(code, PYTHONPATH=str(tmp_path))
    real = _python(code, PYTHONPATH=str(tmp_path), LIGHTNING_ACCEL_EMULATE="0")
    assert (emulated.stdout.strip(), real.stdout.strip()) == ("emulator", "installed SDK"), emulated.stderr[-2000:]


def test_hpu_graphs_callback_in_eager_mode_says_how_to_switch(eager_mode: None) -> None:
    model, (_, data) = digits_classifier(), digits_loaders()
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_epochs=1,
        callbacks=[HPUGraphs()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with pytest.raises(ConfigurationError, match=r"Set PT_HPU_LAZY_MODE=1 before the process starts"):
        trainer.predict(model, data)


@pytest.mark.parametrize(
    ("env", "loaded"),
    [
        ({}, True),  # eager mode (the default since SDK 1.21): the SDK loads with torch
        ({"PT_HPU_LAZY_MODE": "1"}, False),  # lazy mode: loaded when habana_frameworks is imported
        ({"PT_HPU_LAZY_MODE": "1", "PT_HPU_AUTOLOAD": "1"}, True),
        ({"PT_HPU_AUTOLOAD": "0"}, False),
        ({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, False),  # torch's own switch for every backend extension
        ({"LIGHTNING_ACCEL_EMULATE": "0"}, False),
    ],
)
def test_the_sdk_loads_with_torch_in_eager_mode_as_the_sdk_does(env: dict[str, str], loaded: bool) -> None:
    done = _python("import sys, torch\nprint('habana_frameworks.torch' in sys.modules)\n", **env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(loaded)
