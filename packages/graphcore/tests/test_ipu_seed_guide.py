"""Every example of the IPU user guide (seed 004), adapted to lightning-accel's names, runs on the emulator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import poptorch
import pytest
import torch
from ipu_models import BeginBlockModule, BlockContextModule, Linear, needs_cpu_float16
from lightning.pytorch import Trainer
from lightning.pytorch.trainer.states import RunningStage

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.graphcore import IPUPlugin, IPUPrecision, IPUStrategy


def quiet(tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    return {
        "default_root_dir": str(tmp_path),
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        **kwargs,
    }


def test_data_parallel_on_8_ipus(tmp_path: Path) -> None:
    trainer = Trainer(accelerator="ipu", devices=8, max_epochs=1, **quiet(tmp_path))
    trainer.fit(Linear())
    assert isinstance(trainer.strategy, IPUStrategy)
    assert trainer.strategy.training_opts.replication_factor == 8
    assert trainer.global_step == 640 // (2 * 8)
    assert trainer.callback_metrics["val_acc"] > 0.8


def test_mixed_precision(tmp_path: Path) -> None:
    seen: dict[str, torch.dtype] = {}

    class Recording(Linear):
        def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
            seen["input"], seen["weight"] = batch[0].dtype, self.layer.weight.dtype
            return super().training_step(batch, batch_idx)

    trainer = Trainer(accelerator="ipu", devices=8, precision=16, max_epochs=1, **quiet(tmp_path))
    trainer.fit(Recording())
    assert isinstance(trainer.precision_plugin, IPUPrecision)
    assert trainer.precision_plugin.precision == "16-mixed"
    assert seen == {"input": torch.float16, "weight": torch.float32}


@needs_cpu_float16
def test_pure_16_bit(tmp_path: Path) -> None:
    model = Linear()
    model = model.half()
    before = model.layer.weight.detach().clone()
    trainer = Trainer(accelerator="ipu", devices=8, precision=16, max_epochs=1, **quiet(tmp_path))
    trainer.fit(model)
    assert model.layer.weight.dtype == torch.float16
    assert not torch.equal(before, model.layer.weight)


def test_device_iterations_32(tmp_path: Path) -> None:
    model = Linear(rows=8 * 32 * 2 * 3)
    trainer = Trainer(
        accelerator="ipu", devices=8, strategy=IPUPlugin(device_iterations=32), max_epochs=1, **quiet(tmp_path)
    )
    trainer.fit(model)
    # One Lightning batch is one host call of 2 x 32 x 8 samples.
    assert trainer.global_step == 3
    assert trainer.strategy.training_opts.device_iterations == 32


def test_custom_options_with_output_mode_all(tmp_path: Path) -> None:
    inference_opts = poptorch.Options()
    inference_opts.deviceIterations(32)

    training_opts = poptorch.Options()
    # The seed's anchorMode(poptorch.AnchorMode.All): poptorch 3 calls it outputMode(poptorch.OutputMode.All).
    training_opts.outputMode(poptorch.OutputMode.All)
    training_opts.deviceIterations(32)

    trainer = Trainer(
        accelerator="ipu",
        devices=8,
        strategy=IPUPlugin(inference_opts=inference_opts, training_opts=training_opts),
        max_epochs=1,
        **quiet(tmp_path),
    )
    outputs: list[torch.Tensor] = []
    executors: dict[str, Any] = {}

    class Recording(Linear):
        def on_train_batch_end(self, out: Any, batch: Any, batch_idx: int) -> None:
            outputs.append(out["loss"])

        def on_validation_end(self) -> None:
            if self.trainer.sanity_checking:
                return  # the training model is wrapped right before the first training call
            models = self.trainer.strategy.poptorch_models
            executors["training"] = models[RunningStage.TRAINING].options
            executors["validation"] = models[RunningStage.VALIDATING].options

    trainer.fit(Recording(rows=8 * 32 * 2))
    assert executors["training"].output_mode == poptorch.OutputMode.All
    assert executors["training"].device_iterations == 32
    assert executors["validation"].device_iterations == 32
    assert len(outputs) == 1 and outputs[0].dim() == 0  # the mean over every micro-batch returned
    # The user's options are left as they were (the strategy works on clones).
    assert training_opts.replication_factor == 1


@pytest.mark.emulator_only
def test_autoreport_dir(tmp_path: Path) -> None:
    report_dir = tmp_path / "report_dir"
    trainer = Trainer(
        accelerator="ipu",
        devices=8,
        strategy=IPUPlugin(autoreport_dir=str(report_dir)),
        max_epochs=1,
        **quiet(tmp_path),
    )
    trainer.fit(Linear())
    training = json.loads((report_dir / "training" / "emulator_profile.json").read_text())
    assert training["executor"] == "training"
    assert training["replicas"] == 8 and training["ipus_reserved"] == 8
    assert training["ipus"][0]["parameters"] == ["module.layer.bias", "module.layer.weight"]
    assert training["ipus"][0]["operators"]["linear"] == 1
    assert (report_dir / "validation" / "emulator_profile.json").exists()


def _fit_pipelined(tmp_path: Path, module: Any, devices: int, **trainer_kwargs: Any) -> Trainer:
    trainer = Trainer(
        accelerator="ipu",
        devices=devices,
        strategy=IPUPlugin(device_iterations=20, autoreport_dir=str(tmp_path / "reports")),
        **quiet(tmp_path, **{"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1, **trainer_kwargs}),
    )
    trainer.fit(module)
    return trainer


@pytest.mark.parametrize(
    ("module_class", "placement"),
    [
        (BeginBlockModule, [["layer1"], ["layer2", "layer3"], ["layer4"], []]),
        (BlockContextModule, [["layer1"], ["layer2"], ["layer3", "layer4"], []]),
    ],
)
@pytest.mark.emulator_only
def test_model_split_over_4_ipus_with_2_replicas_uses_8_ipus(
    tmp_path: Path, module_class: type, placement: list[list[str]]
) -> None:
    torch.manual_seed(0)
    # Four host calls of 2 (micro-batch) x 20 (device iterations) x 8 (accumulation) x 2 (replicas) samples; the
    # seed's models end in a softmax before the loss, so they need a large learning rate to move in 80 updates.
    module = module_class(rows=2 * 20 * 8 * 2 * 4, lr=1.0)
    before = module.layer1.weight.detach().clone()
    # Training a 4-stage pipeline needs gradient accumulation >= 2 x 4 - 1 = 7 (poptorch's rule).
    trainer = _fit_pipelined(
        tmp_path, module, devices=2, accumulate_grad_batches=8, limit_train_batches=4, limit_val_batches=4
    )
    assert not torch.equal(before, module.layer1.weight)
    report = json.loads((tmp_path / "reports" / "training" / "emulator_profile.json").read_text())
    assert (report["ipus_per_replica"], report["replicas"], report["ipus_reserved"]) == (4, 2, 8)
    assert report["pipeline_stages"] == 4
    per_ipu = [sorted({name.split(".")[1] for name in ipu["parameters"]}) for ipu in report["ipus"]]
    assert per_ipu == placement
    assert report["ipus"][3]["operators"]["softmax"] == 1  # with the loss, computed in the last block
    # Two classes (the sign of the first feature): chance is 0.5, a model that learnt nothing predicts one class
    # (0.47 on this validation set). Measured: 0.96 (BeginBlock) and 0.91 (Block) on the emulator.
    assert trainer.callback_metrics["val_acc"] > 0.75


def test_seed_pipelining_example_literally(tmp_path: Path, emulated_ipus: Callable[[int], None]) -> None:
    """Trainer(devices=8) with a 4-IPU model needs 32 IPUs, and training needs accumulation >= 7."""
    emulated_ipus(32)
    module = BeginBlockModule(rows=2 * 20 * 8 * 7)
    trainer = _fit_pipelined(tmp_path, module, devices=8, accumulate_grad_batches=7, limit_train_batches=1)
    assert trainer.global_step == 1


def test_pipelined_training_without_accumulation_explains_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        _fit_pipelined(tmp_path, BeginBlockModule(rows=2 * 20 * 2), devices=2)
    message = str(info.value)
    assert "gradientAccumulation must be greater than or equal to the number of pipeline stages (7)" in message
    assert "it needs Trainer(accumulate_grad_batches=7) or more; it has 1" in message


def test_4_replicas_of_a_4_ipu_model_do_not_fit_on_8_ipus(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        _fit_pipelined(tmp_path, BeginBlockModule(rows=2 * 20 * 4 * 8), devices=4, accumulate_grad_batches=8)
    assert "Failed to acquire 16 IPU(s)\nNo device found on the system with 16 IPUs" in str(info.value)


def test_3_devices_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"devices=3\) is not accepted with accelerator='ipu'.*1, 2, 4, 8"):
        Trainer(accelerator="ipu", devices=3, **quiet(tmp_path))
