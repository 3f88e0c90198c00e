"""Fabric with DeepSpeed on HPUs: a GPU script's Fabric(strategy="deepspeed"...) with only accelerator="hpu" changed.

The runs are two real processes started by Fabric, over the emulated "hccl" (gloo underneath).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _ds_hpu_helpers import read_json, run_script
from lightning.fabric import Fabric
from lightning.fabric.plugins.precision import HalfPrecision
from lightning.fabric.strategies import DeepSpeedStrategy

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.deepspeed_hpu.fabric import HPUDeepSpeedStrategy

SCRIPT = "fabric_deepspeed.py"


@pytest.mark.parametrize(
    ("stage", "first", "resume"),
    # Each way of asking for it (a Lightning name, Lightning's Fabric class, this package's class) trains and resumes.
    [(1, "name", "hpu"), (2, "lightning", "name"), (3, "hpu", "lightning")],
    ids=["zero1", "zero2", "zero3"],
)
def test_fabric_deepspeed_trains_saves_and_resumes_as_an_uninterrupted_run(
    tmp_path: Path, stage: int, first: str, resume: str
) -> None:
    common = ("--out", str(tmp_path), "--stage", str(stage))
    run_script(SCRIPT, *common, "--strategy", first, "--phase", "first")
    run_script(SCRIPT, *common, "--strategy", resume, "--phase", "resume")
    uninterrupted, resumed = read_json(tmp_path / "first.json"), read_json(tmp_path / "resume.json")
    for result in (uninterrupted, resumed):
        assert result["strategy"] == "HPUDeepSpeedStrategy"
        assert (result["zero_stage"], result["bf16"], result["world_size"]) == (stage, True, 2)
        assert (result["backend"], result["deepspeed_accelerator"]) == ("hccl", "hpu")
        assert result["devices"] == ["hpu"]
        assert result["parameter_device"] == "hpu"
        # fabric.init_module() is DeepSpeed's zero.Init under ZeRO-3 only.
        assert result["partitioned_at_init"] is (stage == 3)
    losses = [uninterrupted["losses"][str(step)] for step in range(12)]
    assert losses[-1] < 0.6 * losses[0]
    assert sum(losses[-3:]) < sum(losses[:3])
    # The fresh run started at the saved step with the saved weights and AdamW moments: from there on it is the
    # uninterrupted run, loss for loss and weight for weight.
    assert sorted(resumed["losses"], key=int) == [str(step) for step in range(6, 12)]
    assert resumed["losses"] == {str(step): uninterrupted["losses"][str(step)] for step in range(6, 12)}
    assert resumed["weights"] == uninterrupted["weights"]


@pytest.mark.parametrize(
    ("strategy", "stage", "offload"),
    [
        ("deepspeed", 2, False),
        ("deepspeed_stage_1_offload", 1, True),
        ("deepspeed_stage_3", 3, False),
        ("hpu_deepspeed_stage_3", 3, False),
    ],
)
def test_lightnings_names_select_the_hpu_strategy(strategy: str, stage: int, offload: bool) -> None:
    fabric = Fabric(accelerator="hpu", devices=2, strategy=strategy, precision="bf16-mixed")
    assert isinstance(fabric.strategy, HPUDeepSpeedStrategy)
    zero: dict[str, Any] = fabric.strategy.config["zero_optimization"]
    assert zero["stage"] == stage
    assert ("offload_optimizer" in zero) is offload
    assert fabric.strategy.process_group_backend == "hccl"


def test_lightnings_instance_keeps_its_arguments() -> None:
    fabric = Fabric(accelerator="hpu", devices=2, strategy=DeepSpeedStrategy(stage=3, offload_optimizer=True))
    assert isinstance(fabric.strategy, HPUDeepSpeedStrategy)
    zero = fabric.strategy.config["zero_optimization"]
    assert (zero["stage"], zero["offload_optimizer"]["device"]) == (3, "cpu")


def test_refuses_another_process_group_backend() -> None:
    with pytest.raises(ConfigurationError) as error:
        Fabric(accelerator="hpu", devices=2, strategy=DeepSpeedStrategy(process_group_backend="nccl"))
    assert str(error.value) == (
        "DeepSpeedStrategy(process_group_backend='nccl') does not run on HPUs. Accepted: "
        "process_group_backend='hccl' or None (HCCL, Gaudi's collective library)."
    )
    with pytest.raises(ConfigurationError, match=r"HPUDeepSpeedStrategy\(process_group_backend='gloo'\)"):
        HPUDeepSpeedStrategy(process_group_backend="gloo")


def test_refuses_a_precision_plugin_deepspeed_cannot_run() -> None:
    with pytest.raises(ConfigurationError) as error:
        Fabric(accelerator="hpu", devices=2, strategy="deepspeed", plugins=[HalfPrecision("bf16-true")])
    assert str(error.value).startswith(
        "HPUDeepSpeedStrategy got the precision plugin HalfPrecision, but DeepSpeed's engine runs the backward pass"
    )
    assert "Fabric(precision='bf16-mixed'" in str(error.value)


def test_refuses_an_unknown_stage_from_either_class() -> None:
    with pytest.raises(ConfigurationError, match=r"^stage=4 is not a ZeRO stage\. Accepted: 0 \(off\), 1"):
        HPUDeepSpeedStrategy(stage=4)
    # Lightning's class builds a config from any stage; the HPU strategy reads it from that config.
    with pytest.raises(ConfigurationError, match=r"^config\['zero_optimization'\]\['stage'\]=5 is not a ZeRO stage"):
        Fabric(accelerator="hpu", devices=2, strategy=DeepSpeedStrategy(stage=5))


def test_refuses_an_argument_the_config_contradicts() -> None:
    with pytest.raises(ConfigurationError) as error:
        HPUDeepSpeedStrategy(stage=3, config={"zero_optimization": {"stage": 2}})
    assert str(error.value).startswith(
        "stage=3 conflicts with the DeepSpeed config that was given: the config has zero_optimization.stage=2."
    )


def test_refuses_nvme_offload_which_no_deepspeed_builds_for_hpus(tmp_path: Path) -> None:
    nvme = DeepSpeedStrategy(
        stage=3,
        offload_optimizer=True,
        offload_parameters=True,
        offload_optimizer_device="nvme",
        offload_params_device="nvme",
        nvme_path=str(tmp_path),
    )
    with pytest.raises(
        ConfigurationError, match=r"^Offloading to NVMe .* needs DeepSpeed's async_io op, and DeepSpeed"
    ):
        Fabric(accelerator="hpu", devices=2, strategy=nvme)


def test_refuses_a_non_hpu_accelerator_before_launch() -> None:
    with pytest.raises(ConfigurationError) as error:
        Fabric(accelerator="cpu", devices=2, strategy=HPUDeepSpeedStrategy())
    assert str(error.value).startswith(
        "HPUDeepSpeedStrategy runs on HPUs, but the accelerator is CPUAccelerator. Accepted: accelerator='hpu'"
    )
