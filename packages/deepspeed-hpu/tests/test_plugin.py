import json
import subprocess
import sys

import lightning.pytorch as pl
import pytest

import lightning_accel.deepspeed_hpu  # noqa: F401  (registers the plugins)
from lightning_accel.core import discovered_plugins
from lightning_accel.core.emulation import reset_emulation_settings
from lightning_accel.deepspeed_hpu.plugin import STRATEGY_NAMES


def _plugin():  # type: ignore[no-untyped-def]
    return next(p for p in discovered_plugins() if p.name == "deepspeed_hpu")


def test_usable_on_the_emulator_with_deepspeed_installed() -> None:
    availability = _plugin().spec.check_availability()
    assert availability.state == "emulated"
    assert "DeepSpeed (upstream) is installed" in availability.reason


@pytest.mark.parametrize(
    ("installed", "said"),
    [
        ("0.19.8", "upstream"),
        ("0.16.1+hpu.synapse.v1.22.0", "Intel's Gaudi fork, SDK 1.22.0"),
    ],
)
def test_the_report_says_whether_deepspeed_is_upstream_or_intels_fork(
    monkeypatch: pytest.MonkeyPatch, installed: str, said: str
) -> None:
    import importlib.metadata

    from lightning_accel.deepspeed_hpu.plugin import deepspeed_flavour

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: installed if name == "deepspeed" else real(name))
    assert deepspeed_flavour() == said


def test_unavailable_without_hpus_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "")
    reset_emulation_settings()
    try:
        availability = _plugin().spec.check_availability()
    finally:
        monkeypatch.undo()
        reset_emulation_settings()
    assert availability.state == "unavailable"
    assert "LIGHTNING_ACCEL_EMULATE=hpu" in availability.reason


def test_every_strategy_name_is_registered_with_its_settings() -> None:
    assert set(STRATEGY_NAMES) == {
        "hpu_deepspeed",
        "hpu_deepspeed_stage_1",
        "hpu_deepspeed_stage_2",
        "hpu_deepspeed_stage_2_offload",
        "hpu_deepspeed_stage_3",
        "hpu_deepspeed_stage_3_offload",
        "hpu_deepspeed_stage_3_offload_nvme",
    }
    registry = pl.strategies.StrategyRegistry
    assert all(name in registry for name in STRATEGY_NAMES)
    assert registry["hpu_deepspeed_stage_3_offload"]["init_params"] == {
        "stage": 3,
        "offload_optimizer": True,
        "offload_parameters": True,
    }
    # Lightning's own names still mean Lightning's strategy.
    assert registry["deepspeed_stage_3"]["strategy"].__name__ == "DeepSpeedStrategy"


def test_listed_by_the_command_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lightning_accel.core.cli", "list", "--json"], capture_output=True, text=True, check=True
    )
    plugin = next(p for p in json.loads(out.stdout)["plugins"] if p["name"] == "deepspeed_hpu")
    assert "hpu_deepspeed_stage_3" in json.dumps(plugin)


def test_auto_accelerator_follows_the_strategy_name() -> None:
    from lightning_accel.deepspeed_hpu import HPUDeepSpeedStrategy
    from lightning_accel.habana import HPUAccelerator

    trainer = pl.Trainer(strategy="hpu_deepspeed_stage_2", devices=1, logger=False, enable_progress_bar=False)
    assert isinstance(trainer.accelerator, HPUAccelerator)
    assert isinstance(trainer.strategy, HPUDeepSpeedStrategy)


def test_unknown_stage_name_lists_the_names_the_distribution_provides() -> None:
    from lightning_accel.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as error:
        pl.Trainer(accelerator="hpu", strategy="hpu_deepspeed_stage_4", logger=False)
    message = str(error.value)
    assert message.startswith("strategy='hpu_deepspeed_stage_4' is not a name lightning-accel-deepspeed-hpu ")
    assert "hpu_deepspeed_stage_3_offload_nvme" in message and "`lightning-accel list`" in message


@pytest.mark.parametrize(
    ("name", "stage", "offload_optimizer"),
    [("deepspeed", 2, False), ("deepspeed_stage_1", 1, False), ("deepspeed_stage_3_offload", 3, True)],
)
def test_lightnings_deepspeed_names_select_deepspeed_on_hpus_with_the_same_stage(
    name: str, stage: int, offload_optimizer: bool
) -> None:
    from lightning_accel.deepspeed_hpu import HPUDeepSpeedStrategy

    trainer = pl.Trainer(accelerator="hpu", devices=2, strategy=name, logger=False, enable_progress_bar=False)
    assert type(trainer.strategy) is HPUDeepSpeedStrategy
    zero = trainer.strategy.config["zero_optimization"]
    assert zero["stage"] == stage
    assert ("offload_optimizer" in zero) is offload_optimizer


def test_an_instance_of_lightnings_deepspeed_becomes_the_hpu_strategy_with_its_arguments() -> None:
    from lightning.pytorch.strategies import DeepSpeedStrategy

    from lightning_accel.core.errors import ConfigurationError
    from lightning_accel.deepspeed_hpu import HPUDeepSpeedStrategy

    given = DeepSpeedStrategy(stage=3, offload_optimizer=True, load_full_weights=True, initial_scale_power=12)
    trainer = pl.Trainer(accelerator="hpu", devices=2, strategy=given, precision="bf16-mixed", logger=False)
    strategy = trainer.strategy
    assert type(strategy) is HPUDeepSpeedStrategy
    zero = strategy.config["zero_optimization"]
    assert (zero["stage"], zero["offload_optimizer"]["device"]) == (3, "cpu")
    assert (strategy.load_full_weights, strategy.initial_scale_power) == (True, 12)
    assert strategy.process_group_backend == "hccl"

    with pytest.raises(ConfigurationError, match=r"DeepSpeedStrategy\(process_group_backend='nccl'\) does not run"):
        pl.Trainer(accelerator="hpu", devices=2, strategy=DeepSpeedStrategy(process_group_backend="nccl"))
