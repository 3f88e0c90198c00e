"""The LightningCLI examples run with their YAML configs on the emulators, with vendor names given as strings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# One short epoch (at most 32 steps per process) and a short validation: enough to show that the config selects the
# vendor classes and that they learn, in well under a minute per case on two CPU cores.
SHORT = [
    "--trainer.max_epochs",
    "1",
    "--trainer.limit_train_batches",
    "32",
    "--trainer.limit_val_batches",
    "4",
    "--trainer.enable_progress_bar",
    "false",
]
# Ten digit classes: chance is 0.1. Measured after SHORT on the emulators: 0.86 to 0.89 depending on the case; a run
# whose updates never reach the weights stays near chance.
MIN_ACCURACY = 0.7

CASES = [
    ("habana", "config.yaml", [], "hpu", "HPUAccelerator", "SingleHPUStrategy"),
    (
        "habana",
        "config.yaml",
        ["--trainer.devices", "2", "--trainer.strategy", "hpu_parallel"],
        "hpu",
        "HPUAccelerator",
        "HPUParallelStrategy",
    ),
    (
        "habana",
        "config.yaml",
        ["--trainer.devices", "2", "--trainer.strategy", "hpu_deepspeed_stage_3", "--trainer.precision", "bf16-mixed"],
        "hpu",
        "HPUAccelerator",
        "HPUDeepSpeedStrategy",
    ),
    ("graphcore", "config.yaml", [], "ipu", "IPUAccelerator", "IPUStrategy"),
    ("graphcore", "config_device_iterations.yaml", [], "ipu", "IPUAccelerator", "IPUStrategy"),
]


@pytest.mark.parametrize(
    ("folder", "config", "extra", "emulate", "accelerator", "strategy"),
    CASES,
    ids=["hpu-1", "hpu-2-parallel", "hpu-2-deepspeed-stage-3", "ipu-8", "ipu-8-device-iterations"],
)
def test_cli_example_fits_with_its_config(  # type: ignore[no-untyped-def]
    run, tmp_path: Path, folder: str, config: str, extra: list[str], emulate: str, accelerator: str, strategy: str
) -> None:
    script = EXAMPLES / folder / "cli.py"
    args = [str(script), "fit", "--config", str(EXAMPLES / folder / config), *SHORT, *extra]
    process = run(args, env={"LIGHTNING_ACCEL_EMULATE": emulate}, cwd=tmp_path)
    assert process.returncode == 0, process.stderr[-4000:]
    assert f"accelerator: {accelerator}, strategy: {strategy}" in process.stdout, process.stdout[-2000:]
    accuracy = re.findall(r"final validation accuracy: ([0-9.]+)", process.stdout)
    assert accuracy, process.stdout[-2000:]
    assert float(accuracy[-1]) >= MIN_ACCURACY, process.stdout[-2000:]
    if config == "config_device_iterations.yaml":
        assert "devices: 8, device iterations: 4" in process.stdout


@pytest.mark.parametrize("folder", ["habana", "graphcore"])
def test_the_main_config_names_accelerator_and_strategy_as_strings(folder: str) -> None:
    trainer = yaml.safe_load((EXAMPLES / folder / "config.yaml").read_text())["trainer"]
    assert isinstance(trainer["accelerator"], str)
    assert isinstance(trainer["strategy"], str)
    assert trainer["accelerator"] == {"habana": "hpu", "graphcore": "ipu"}[folder]


def test_the_cli_refuses_an_accelerator_that_is_not_installed(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = EXAMPLES / "habana" / "config.yaml"
    args = [str(EXAMPLES / "habana" / "cli.py"), "fit", "--config", str(config), *SHORT]
    process = run(args, env={"LIGHTNING_ACCEL_EMULATE": "0"}, cwd=tmp_path)
    assert process.returncode != 0
    assert "LIGHTNING_ACCEL_EMULATE=hpu" in process.stderr  # the error says how to turn the emulator on
