"""What users get for each way of configuring the strategy, and the errors for bad input (no training here)."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.plugins import DeepSpeedPrecision

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.deepspeed_hpu import HPUDeepSpeedPrecisionPlugin, HPUDeepSpeedStrategy
from lightning_accel.deepspeed_hpu.config import check_batch_size, check_precision
from lightning_accel.deepspeed_hpu.inference import InferenceSettings
from lightning_accel.deepspeed_hpu.optimizers import check_client_optimizer


def test_strategy_string_and_precision_string_give_hpu_classes() -> None:
    trainer = Trainer(accelerator="hpu", devices=2, strategy="hpu_deepspeed_stage_3", precision="bf16-mixed")
    assert isinstance(trainer.strategy, HPUDeepSpeedStrategy)
    assert trainer.strategy.config["zero_optimization"]["stage"] == 3
    # Lightning's connector made a DeepSpeedPrecision for a DeepSpeed strategy; the strategy translated it.
    assert isinstance(trainer.precision_plugin, HPUDeepSpeedPrecisionPlugin)
    assert trainer.precision_plugin.precision == "bf16-mixed"
    assert trainer.strategy.process_group_backend == "hccl"


def test_lightning_deepspeed_precision_in_plugins_is_translated() -> None:
    strategy = HPUDeepSpeedStrategy(parallel_devices=[torch.device("hpu")] * 2)
    trainer = Trainer(accelerator="hpu", strategy=strategy, plugins=[DeepSpeedPrecision("bf16-true")])
    assert isinstance(trainer.precision_plugin, HPUDeepSpeedPrecisionPlugin)
    assert trainer.precision_plugin.precision == "bf16-true"
    assert trainer.num_devices == 2
    assert strategy.root_device == torch.device("hpu")


def test_parallel_devices_as_a_number() -> None:
    strategy = HPUDeepSpeedStrategy(parallel_devices=2)
    assert strategy.parallel_devices == [torch.device("hpu")] * 2


@pytest.mark.parametrize("stage", [4, -1, "3", True])
def test_unknown_stage(stage: object) -> None:
    with pytest.raises(ConfigurationError, match=rf"stage={stage!r} is not a ZeRO stage.*Accepted: 0"):
        HPUDeepSpeedStrategy(stage=stage)  # type: ignore[arg-type]


def test_unknown_stage_in_config() -> None:
    with pytest.raises(ConfigurationError, match=r"config\['zero_optimization'\]\['stage'\]=7"):
        HPUDeepSpeedStrategy(config={"zero_optimization": {"stage": 7}})


def test_config_conflicting_with_arguments() -> None:
    with pytest.raises(ConfigurationError, match=r"stage=3 conflicts .* zero_optimization.stage=2"):
        HPUDeepSpeedStrategy(config={"zero_optimization": {"stage": 2}}, stage=3)
    with pytest.raises(ConfigurationError, match=r"offload_optimizer=True conflicts .* does not set"):
        HPUDeepSpeedStrategy(config={"zero_optimization": {"stage": 2}}, offload_optimizer=True)


def test_config_agreeing_with_arguments_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # strategy="hpu_deepspeed_stage_3" passes stage=3; a config file of stage 3 says the same.
    strategy = HPUDeepSpeedStrategy(config={"zero_optimization": {"stage": 3}}, stage=3)
    assert strategy.config["zero_optimization"]["stage"] == 3
    path = tmp_path / "ds_config.json"
    path.write_text('{"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 4}')
    monkeypatch.setenv("PL_DEEPSPEED_CONFIG_PATH", str(path))
    from lightning.pytorch import Trainer

    trainer = Trainer(accelerator="hpu", devices=1, strategy="hpu_deepspeed_stage_3", logger=False)
    assert trainer.strategy.config["train_micro_batch_size_per_gpu"] == 4


def test_config_path_that_is_missing_unreadable_or_not_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match=r"config='.*nope.json': no such file"):
        HPUDeepSpeedStrategy(config=str(tmp_path / "nope.json"))
    broken = tmp_path / "broken.json"
    broken.write_text('{"zero_optimization": {"stage": 2,}}')
    with pytest.raises(ConfigurationError, match=r"is not valid JSON.*line 1"):
        HPUDeepSpeedStrategy(config=broken)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    monkeypatch.setenv("PL_DEEPSPEED_CONFIG_PATH", str(listed))
    with pytest.raises(ConfigurationError, match=r"PL_DEEPSPEED_CONFIG_PATH=.* holds a JSON list"):
        HPUDeepSpeedStrategy()


def test_config_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ds.json"
    path.write_text('{"zero_optimization": {"stage": 1}, "tensor_parallel": {"tp_size": 2}}')
    monkeypatch.setenv("PL_DEEPSPEED_CONFIG_PATH", str(path))
    strategy = HPUDeepSpeedStrategy()
    assert strategy.config == {"zero_optimization": {"stage": 1}}
    assert strategy.inference.tp_size == 2  # inference keys are kept apart from the training config


def test_unknown_keyword_argument_and_optimizer_type() -> None:
    with pytest.raises(ConfigurationError, match=r"unexpected keyword argument\(s\) stagee"):
        HPUDeepSpeedStrategy(stagee=3)
    with pytest.raises(ConfigurationError, match=r"\['type'\]='Adamm' is not an optimizer"):
        HPUDeepSpeedStrategy(config={"optimizer": {"type": "Adamm"}})


def test_unsupported_precision() -> None:
    with pytest.raises(ConfigurationError, match=r"precision='64-true' is not supported .* Accepted: 'bf16-mixed'"):
        HPUDeepSpeedPrecisionPlugin("64-true")
    with pytest.raises(ConfigurationError, match=r"enables bf16 .* precision='32-true'"):
        check_precision({"bf16": {"enabled": True}}, "32-true", fp16_supported=True)
    with pytest.raises(ConfigurationError, match=r"precision='16-mixed' needs float16"):
        check_precision({}, "16-mixed", fp16_supported=False)


def test_batch_size_that_does_not_add_up() -> None:
    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}
    check_batch_size(config, world_size=2)
    with pytest.raises(ConfigurationError, match=r"must equal .* = 32\. Fix: set it to 32"):
        check_batch_size(config, world_size=8)


def test_torch_optimizer_with_optimizer_offload() -> None:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    config = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    with pytest.raises(
        ConfigurationError,
        match=r"SGD, but with offload_optimizer=True .* Accepted: deepspeed.ops.adam.DeepSpeedCPUAdam",
    ):
        check_client_optimizer(optimizer, config)
    forced = {**config, "zero_force_ds_cpu_optimizer": False}
    with pytest.raises(ConfigurationError, match=r"SGD, which DeepSpeed has not tested with ZeRO stage 2"):
        check_client_optimizer(optimizer, forced)
    check_client_optimizer(optimizer, {**forced, "zero_allow_untested_optimizer": True})


def test_kernel_injection_needs_the_kernels_and_graphs_need_lazy_mode() -> None:
    inject = InferenceSettings.merge({}, {"replace_with_kernel_inject": True})
    with pytest.raises(ConfigurationError, match=r"replace_with_kernel_inject=True .* does not ship"):
        inject.validate(2, has_inference_kernels=False, lazy=True)
    inject.validate(2, has_inference_kernels=True, lazy=False)
    graphs = InferenceSettings.merge({"enable_cuda_graph": True}, {})
    with pytest.raises(ConfigurationError, match=r"enable_cuda_graph=True .* lazy mode only \(PT_HPU_LAZY_MODE=1"):
        graphs.validate(2, has_inference_kernels=False, lazy=False)
    graphs.validate(2, has_inference_kernels=False, lazy=True)
    with pytest.raises(ConfigurationError, match=r"tp_size': 3\} must be a positive divisor .* \(2 ="):
        tensor_parallel = InferenceSettings.merge({}, {"tensor_parallel": {"tp_size": 3}})
        tensor_parallel.validate(2, has_inference_kernels=True, lazy=True)


def test_graphs_are_refused_before_the_engine_by_the_sdks_mode_though_eager_mode_exports_the_graph_apis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import deepspeed

    from lightning_accel.habana import sdk

    if sdk.core_module().is_lazy():
        pytest.skip("needs the SDK in eager mode (PT_HPU_LAZY_MODE=0 or unset, the default)")
    if sdk.is_emulated():
        # The emulated SDK is the 1.24 period's: hpu.HPUGraph exists in eager mode, and creating one raises.
        assert callable(sdk.hpu_module().HPUGraph)
    built: list[Any] = []
    monkeypatch.setattr(deepspeed, "init_inference", lambda *args, **kwargs: built.append(kwargs))
    strategy = HPUDeepSpeedStrategy(enable_cuda_graph=True)
    with pytest.raises(ConfigurationError, match=r"enable_cuda_graph=True .* lazy mode only \(PT_HPU_LAZY_MODE=1"):
        strategy._initialize_deepspeed_inference(torch.nn.Linear(2, 2))
    assert built == []  # refused before DeepSpeed builds the inference engine


class _AsyncIOBuilder:
    """Stands in for DeepSpeed's AsyncIOBuilder, so that the test does not depend on this machine having libaio."""

    def __init__(self, compatible: bool) -> None:
        self.compatible = compatible

    def is_compatible(self, verbose: bool = False) -> bool:
        return self.compatible


@pytest.fixture
def async_io_op(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool | None], list[str]]:
    """Call with True (the op can be built), False (it cannot) or None (no such builder); returns the ops asked for."""
    from deepspeed.accelerator import get_accelerator

    asked: list[str] = []

    def control(compatible: bool | None) -> list[str]:
        def create_op_builder(name: str) -> _AsyncIOBuilder | None:
            asked.append(name)
            return None if compatible is None else _AsyncIOBuilder(compatible)

        monkeypatch.setattr(get_accelerator(), "create_op_builder", create_op_builder)
        return asked

    return control


def test_nvme_offload_with_the_async_io_op_is_configured(
    tmp_path: Path, async_io_op: Callable[[bool | None], list[str]]
) -> None:
    asked = async_io_op(True)
    strategy = HPUDeepSpeedStrategy(
        stage=3, offload_optimizer=True, offload_optimizer_device="nvme", nvme_path=str(tmp_path)
    )
    assert asked == ["AsyncIOBuilder"]
    offload = strategy.config["zero_optimization"]["offload_optimizer"]
    assert (offload["device"], offload["nvme_path"]) == ("nvme", str(tmp_path))


def test_nvme_offload_is_refused_because_deepspeeds_hpu_accelerator_has_no_async_io_builder(tmp_path: Path) -> None:
    # DeepSpeed's own HPU accelerator, not a stand-in: neither upstream DeepSpeed nor Intel's fork has an HPU
    # AsyncIOBuilder (op_builder/hpu/), so the refusal names that, not a missing library.
    from deepspeed.accelerator import get_accelerator

    assert type(get_accelerator()).__name__ == "HPU_Accelerator"
    with pytest.raises(
        ConfigurationError, match=r"HPU_Accelerator has no AsyncIOBuilder .* no DeepSpeed has one for HPUs"
    ):
        HPUDeepSpeedStrategy(stage=3, offload_optimizer=True, offload_optimizer_device="nvme", nvme_path=str(tmp_path))


def test_nvme_offload_with_a_builder_that_cannot_build_says_what_is_missing(
    tmp_path: Path, async_io_op: Callable[[bool | None], list[str]]
) -> None:
    asked = async_io_op(False)
    with pytest.raises(
        ConfigurationError, match=r"AsyncIOBuilder cannot build here \(DeepSpeed's builder needs the libaio"
    ):
        HPUDeepSpeedStrategy(stage=3, offload_optimizer=True, offload_optimizer_device="nvme", nvme_path=str(tmp_path))
    assert asked == ["AsyncIOBuilder"]


def test_nvme_offload_needs_a_writable_directory(
    tmp_path: Path, async_io_op: Callable[[bool | None], list[str]]
) -> None:
    async_io_op(True)
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(ConfigurationError, match=r"nvme_path='.*dir' is not a writable directory"):
        HPUDeepSpeedStrategy(stage=3, offload_parameters=True, offload_params_device="nvme", nvme_path=str(missing))


def test_cpu_checkpointing_reaches_deepspeed(monkeypatch: pytest.MonkeyPatch) -> None:
    import deepspeed

    configured: list[dict[str, Any]] = []
    monkeypatch.setattr(deepspeed.checkpointing, "configure", lambda **kwargs: configured.append(kwargs))
    strategy = HPUDeepSpeedStrategy(stage=3, cpu_checkpointing=True)
    strategy._set_deepspeed_activation_checkpointing()
    assert [kwargs["checkpoint_in_cpu"] for kwargs in configured] == [True]
