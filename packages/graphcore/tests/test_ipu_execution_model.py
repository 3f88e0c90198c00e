"""poptorch's execution model under Lightning: the step's Python is traced once, host edits reach the device.

These hold on IPU hardware as on the emulator: a compiled step does not run its Python again, so ``self.log``
must log values the compiled program returns, and a host-side edit of the weights reaches the device only when it
is copied there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from ipu_models import Linear, blobs
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader

from lightning_accel.core.pycompat import strict_zip
from lightning_accel.graphcore import IPUAccelerator, IPUStrategy


class Counted(Linear):
    """Counts the Python calls of its steps and logs two values that change with every step."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_calls = 0

    def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
        self.step_calls += 1
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        self.log("weight_norm", self.layer.weight.norm())
        return loss

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(self.rows), batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self) -> Any:
        return []


class MetricsPerStep(Callback):
    def __init__(self) -> None:
        self.values: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer: Trainer, module: LightningModule, *args: Any) -> None:
        self.values.append({key: float(value) for key, value in trainer.callback_metrics.items()})


def fit(module: LightningModule, accelerator: str, callbacks: list[Callback], **kwargs: Any) -> Trainer:
    options: dict[str, Any] = {
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "max_epochs": 1,
        "callbacks": callbacks,
        **kwargs,
    }
    if accelerator == "ipu":
        options.update(accelerator=IPUAccelerator(), strategy=IPUStrategy(), devices=1)
    else:
        options.update(accelerator="cpu", devices=1)
    trainer = Trainer(**options)
    trainer.fit(module)
    return trainer


def test_training_step_runs_once_and_logs_the_values_of_every_step(tmp_path: Path) -> None:
    seed_everything(0)
    on_ipu, ipu_metrics = Counted(rows=40, batch_size=4), MetricsPerStep()
    seed_everything(0)
    on_cpu, cpu_metrics = Counted(rows=40, batch_size=4), MetricsPerStep()
    fit(on_ipu, "ipu", [ipu_metrics], default_root_dir=str(tmp_path / "ipu"))
    fit(on_cpu, "cpu", [cpu_metrics], default_root_dir=str(tmp_path / "cpu"))

    # 10 host calls, one compiled executable: its Python ran once, when poptorch traced it.
    assert on_ipu.step_calls == 1
    assert on_cpu.step_calls == 10
    assert len(ipu_metrics.values) == 10
    losses = [step["train_loss"] for step in ipu_metrics.values]
    assert len(set(losses)) == 10, f"the logged loss must change every step, got {losses}"
    for ipu_step, cpu_step in strict_zip(ipu_metrics.values, cpu_metrics.values):
        assert ipu_step.keys() == cpu_step.keys() == {"train_loss", "weight_norm"}
        for key in ipu_step:
            assert abs(ipu_step[key] - cpu_step[key]) < 1e-5, (key, ipu_step[key], cpu_step[key])


class ScaleWeightsAfterEpoch(Callback):
    """A host-side edit of the weights between epochs (as weight-averaging or pruning callbacks make)."""

    def on_train_epoch_end(self, trainer: Trainer, module: LightningModule) -> None:
        with torch.no_grad():
            for param in module.parameters():
                param.mul_(0.5)


def test_host_side_weight_edit_between_epochs_reaches_the_device(tmp_path: Path) -> None:
    seed_everything(0)
    on_ipu = Counted(rows=40, batch_size=4)
    seed_everything(0)
    on_cpu = Counted(rows=40, batch_size=4)
    fit(on_ipu, "ipu", [ScaleWeightsAfterEpoch()], max_epochs=3, default_root_dir=str(tmp_path / "ipu"))
    fit(on_cpu, "cpu", [ScaleWeightsAfterEpoch()], max_epochs=3, default_root_dir=str(tmp_path / "cpu"))
    for (name, ipu_param), cpu_param in strict_zip(on_ipu.named_parameters(), on_cpu.parameters()):
        torch.testing.assert_close(ipu_param, cpu_param, msg=f"{name} differs from the CPU run's")


class WithAdam(Counted):
    """Adam keeps moments on the device: a resume that lost them would take different steps."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.05)


def test_checkpoint_saved_after_fit_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path: Path) -> None:
    seed_everything(0)
    uninterrupted = WithAdam(rows=40, batch_size=4)
    seed_everything(0)
    resumed = WithAdam(rows=40, batch_size=4)
    fit(uninterrupted, "ipu", [], max_epochs=4, default_root_dir=str(tmp_path / "a"))
    first = fit(resumed, "ipu", [], max_epochs=2, default_root_dir=str(tmp_path / "b"))
    checkpoint = tmp_path / "after_fit.ckpt"
    first.save_checkpoint(checkpoint)

    saved = torch.load(checkpoint, weights_only=False)["optimizer_states"][0]
    # poptorch's optimizer state: the moments live in ipu_state, the hyper-parameters in ipu_param.
    assert {"ipu_state", "ipu_param", "state", "param_groups"} <= saved.keys()
    assert saved["ipu_state"], "the device's Adam moments must be in the checkpoint"

    seed_everything(0)
    fresh = WithAdam(rows=40, batch_size=4)
    trainer = Trainer(
        accelerator=IPUAccelerator(),
        strategy=IPUStrategy(),
        devices=1,
        max_epochs=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path / "c"),
    )
    trainer.fit(fresh, ckpt_path=checkpoint)
    assert trainer.global_step == 40
    for (name, got), expected in strict_zip(fresh.named_parameters(), uninterrupted.parameters()):
        torch.testing.assert_close(got, expected, msg=f"{name} differs from the uninterrupted run's")


def test_poptorch_assertions_while_compiling_become_clear_errors(tmp_path: Path) -> None:
    from lightning_accel.core.errors import ConfigurationError
    from lightning_accel.graphcore import sdk

    # The seam's poptorch is a function until issue 13 item 2 makes it the module itself.
    poptorch = sdk.poptorch() if callable(sdk.poptorch) else sdk.poptorch

    class NoIpuForTheBlock(Counted):
        def __init__(self) -> None:
            super().__init__(rows=40, batch_size=4)
            self.layer = poptorch.BeginBlock(torch.nn.Linear(5, 2))  # no ipu_id: poptorch asserts

    with pytest.raises(ConfigurationError, match=r"(?s)poptorch could not compile the training model: .*SameAsIpu.*"):
        fit(NoIpuForTheBlock(), "ipu", [], default_root_dir=str(tmp_path))


def test_gradient_clipping_with_rmsprop_is_refused_as_poptorch_has_no_max_grad_norm_for_it(tmp_path: Path) -> None:
    from lightning_accel.core.errors import ConfigurationError

    class WithRMSprop(Counted):
        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.RMSprop(self.parameters(), lr=0.01)

    with pytest.raises(ConfigurationError, match=r"poptorch\.optim\.RMSprop has no max_grad_norm"):
        fit(WithRMSprop(rows=40, batch_size=4), "ipu", [], gradient_clip_val=1.0, default_root_dir=str(tmp_path))
