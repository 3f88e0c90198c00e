"""IPUStrategy behaviour a Lightning user sees: updates, schedulers, logging, clipping, checkpoints and errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from ipu_models import Linear, blobs, needs_cpu_float16
from lightning.pytorch import Callback, Trainer
from torch.utils.data import DataLoader

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.pycompat import strict_zip
from lightning_accel.graphcore import IPUAccelerator, IPUPrecision, IPUStrategy
from lightning_accel.graphcore.sdk import poptorch


def make_trainer(tmp_path: Path, devices: int = 1, strategy: IPUStrategy | None = None, **kwargs: Any) -> Trainer:
    options: dict[str, Any] = {
        "default_root_dir": str(tmp_path),
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "max_epochs": 1,
        "num_sanity_val_steps": 0,
        **kwargs,
    }
    return Trainer(accelerator=IPUAccelerator(), strategy=strategy or IPUStrategy(), devices=devices, **options)


class Ordered(Linear):
    """No shuffling, no validation: the update sequence is fully determined."""

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(self.rows), batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self) -> Any:
        return []  # no validation


def reference_updates(model: Linear, rows: int, micro: int, per_update: int, updates: int) -> None:
    """Plain PyTorch: each update averages the gradients of ``per_update`` consecutive micro-batches."""
    data = blobs(rows)
    optimizer = torch.optim.SGD(model.parameters(), lr=model.lr)
    x, y = data.tensors
    for step in range(updates):
        optimizer.zero_grad()
        start = step * per_update * micro
        losses = [
            F.cross_entropy(
                model(x[start + i * micro : start + (i + 1) * micro]), y[start + i * micro : start + (i + 1) * micro]
            )
            for i in range(per_update)
        ]
        (sum(losses) / per_update).backward()
        optimizer.step()


def test_accumulate_grad_batches_gives_the_right_number_of_updates(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Ordered(rows=64, batch_size=2)
    reference = copy.deepcopy(model)
    # devices=2 x device_iterations=2 x accumulate=2: each host call takes 16 samples and makes 2 updates of 8.
    trainer = make_trainer(
        tmp_path, devices=2, strategy=IPUStrategy(device_iterations=2), accumulate_grad_batches=2, limit_train_batches=3
    )
    trainer.fit(model)
    assert trainer.global_step == 3  # one Lightning step per host call
    assert trainer.accumulate_grad_batches == 2  # restored after fit
    reference_updates(reference, rows=64, micro=2, per_update=4, updates=6)
    for got, want in strict_zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want)
    wrong = copy.deepcopy(reference)
    reference_updates(wrong, rows=64, micro=2, per_update=4, updates=1)
    assert not torch.allclose(wrong.layer.weight, model.layer.weight)


def test_lr_scheduler_changes_reach_the_device_each_step(tmp_path: Path) -> None:
    weights: list[torch.Tensor] = []

    class Frozen(Ordered):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.5)
            # lr 0.5 for the first step, then 0: the device must stop updating after step 1.
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 if step == 0 else 0.0)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

        def on_train_batch_end(self, *args: Any) -> None:
            weights.append(self.layer.weight.detach().clone())

    model = Frozen(rows=64)
    initial = model.layer.weight.detach().clone()
    make_trainer(tmp_path, limit_train_batches=4).fit(model)
    assert not torch.equal(initial, weights[0])
    assert all(torch.equal(weights[0], later) for later in weights[1:])


def test_validation_sees_the_latest_trained_weights(tmp_path: Path) -> None:
    class Probe(Linear):
        def validation_step(self, batch: Any, batch_idx: Any) -> None:
            self.log("weight_sum", self.layer.weight.sum())

    model = Probe(rows=64)
    trainer = make_trainer(tmp_path, devices=2, max_epochs=2, limit_val_batches=1)
    trainer.fit(model)
    torch.testing.assert_close(trainer.callback_metrics["weight_sum"], model.layer.weight.sum().detach())


def test_self_log_records_every_step_value(tmp_path: Path) -> None:
    class Logging(Ordered):
        def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
            self.log("batch_sum", batch[0].sum())
            self.log("constant", 3)
            return super().training_step(batch, batch_idx)

    class Check(Callback):
        def __init__(self) -> None:
            self.pairs: list[tuple[float, float]] = []

        def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.pairs.append((trainer.callback_metrics["batch_sum"].item(), batch[0].sum().item()))
            assert trainer.callback_metrics["constant"].item() == 3

    check = Check()
    make_trainer(tmp_path, limit_train_batches=5, callbacks=[check]).fit(Logging(rows=64))
    assert len(check.pairs) == 5
    for logged, expected in check.pairs:
        assert logged == pytest.approx(expected, rel=1e-5)
    assert len({logged for logged, _ in check.pairs}) == 5  # real per-step values, not the traced first one


def test_gradient_clipping_by_norm_on_the_device(tmp_path: Path) -> None:
    class Huge(Ordered):
        def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
            return 1000 * super().training_step(batch, batch_idx)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=1.0)

    model = Huge(rows=64)
    before = [p.detach().clone() for p in model.parameters()]
    make_trainer(tmp_path, gradient_clip_val=0.25, limit_train_batches=1).fit(model)
    step = torch.cat([(p.detach() - b).flatten() for p, b in strict_zip(model.parameters(), before)])
    torch.testing.assert_close(step.norm(), torch.tensor(0.25))


def test_clipping_by_value_is_refused(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, gradient_clip_val=0.5, gradient_clip_algorithm="value")
    with pytest.raises(ConfigurationError, match="gradient_clip_algorithm='value'"):
        trainer.fit(Linear())


def test_multiple_optimizers_are_refused(tmp_path: Path) -> None:
    class Two(Linear):
        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.SGD(self.parameters(), lr=0.1)]

    # Lightning itself refuses several optimizers with automatic optimization; manual optimization is refused below.
    with pytest.raises(RuntimeError, match="multiple optimizers"):
        make_trainer(tmp_path).fit(Two())


def test_unsupported_optimizer_is_refused(tmp_path: Path) -> None:
    class Adagrad(Linear):
        def configure_optimizers(self) -> Any:
            return torch.optim.Adagrad(self.parameters())

    with pytest.raises(ConfigurationError, match="Adagrad is not supported on IPUs"):
        make_trainer(tmp_path).fit(Adagrad())


def test_manual_optimization_is_refused(tmp_path: Path) -> None:
    class Manual(Linear):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

    with pytest.raises(ConfigurationError, match="Manual optimization"):
        make_trainer(tmp_path).fit(Manual())


def test_batch_transfer_hook_is_refused(tmp_path: Path) -> None:
    class Moving(Linear):
        def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
            return batch

    with pytest.raises(ConfigurationError, match="Overriding `transfer_batch_to_device` is not supported"):
        make_trainer(tmp_path).fit(Moving())


def test_optimizer_state_is_checkpointed(tmp_path: Path) -> None:
    class WithAdam(Ordered):
        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=0.01)

    def run(max_epochs: int, ckpt_path: Path | None = None) -> tuple[Trainer, WithAdam]:
        torch.manual_seed(0)
        model = WithAdam(rows=64)
        trainer = make_trainer(
            tmp_path, strategy=IPUStrategy(device_iterations=2), limit_train_batches=3, max_epochs=max_epochs
        )
        trainer.fit(model, ckpt_path=ckpt_path)
        return trainer, model

    trainer, _ = run(max_epochs=1)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    # poptorch's format: the device's Adam state is in ipu_state, by the compiled module's parameter names.
    state = torch.load(path, weights_only=False)["optimizer_states"][0]["ipu_state"]
    assert state["Step___module.layer.weight"].item() == 6  # 3 host calls x 2 device iterations
    assert state["Accl1___module.layer.weight"].abs().sum() > 0

    # Resuming restores the device's Adam moments: it continues exactly like an uninterrupted run.
    _, straight = run(max_epochs=2)
    _, resumed = run(max_epochs=2, ckpt_path=path)
    for a, b in strict_zip(resumed.parameters(), straight.parameters()):
        torch.testing.assert_close(a, b)


def _as_the_older_emulator_wrote_it(path: Path, velocity_scaling: float) -> Path:
    """The checkpoint in the format of lightning-accel's emulator before issue 47: SGD's inputs under Adam's names
    (learningRate___specific___*) and its velocity without the velocity scaling."""
    checkpoint = torch.load(path, weights_only=False)
    state = checkpoint["optimizer_states"][0]
    weights = sorted(name.split("___", 1)[1] for name in state["ipu_state"])
    state["ipu_param"] = {
        **{f"learningRate___specific___{weight}": torch.tensor(0.01) for weight in weights},
        **{f"weightDecay___specific___{weight}": torch.tensor(0.0) for weight in weights},
        "lossScaling_FLOAT": torch.tensor(velocity_scaling),
    }
    state["ipu_state"] = {name: value / velocity_scaling for name, value in state["ipu_state"].items()}
    older = path.with_name("older.ckpt")
    torch.save(checkpoint, older)
    return older


def _fit_sgd(tmp_path: Path, max_epochs: int, ckpt_path: Path | None = None, **sgd: Any) -> tuple[Trainer, Ordered]:
    class WithMomentum(Ordered):
        def configure_optimizers(self) -> Any:
            return poptorch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9, **sgd)

    torch.manual_seed(0)
    model = WithMomentum(rows=64)
    trainer = make_trainer(tmp_path, limit_train_batches=3, max_epochs=max_epochs)
    trainer.fit(model, ckpt_path=ckpt_path)
    return trainer, model


def test_an_sgd_checkpoint_of_the_older_emulator_resumes_converted(tmp_path: Path) -> None:
    # The separate variant's velocity carries the velocity scaling, which poptorch sets to the loss scaling.
    trainer, _ = _fit_sgd(tmp_path, max_epochs=1, loss_scaling=4.0)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    older = _as_the_older_emulator_wrote_it(path, velocity_scaling=4.0)
    _, straight = _fit_sgd(tmp_path, max_epochs=2, loss_scaling=4.0)
    with pytest.warns(UserWarning, match=r"written by an older lightning-accel IPU emulator: its velocities were"):
        _, resumed = _fit_sgd(tmp_path, max_epochs=2, ckpt_path=older, loss_scaling=4.0)
    for a, b in strict_zip(resumed.parameters(), straight.parameters()):
        torch.testing.assert_close(a, b)


def test_a_combined_sgd_checkpoint_of_the_older_emulator_is_refused_with_what_to_do(tmp_path: Path) -> None:
    trainer, _ = _fit_sgd(tmp_path, max_epochs=1, use_combined_accum=True)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    older = _as_the_older_emulator_wrote_it(path, velocity_scaling=1.0)
    with pytest.raises(ConfigurationError, match=r"delete 'ipu_state' and 'ipu_param' from checkpoint\['optimizer_st"):
        _fit_sgd(tmp_path, max_epochs=2, ckpt_path=older, use_combined_accum=True)


def test_validate_test_predict_see_every_sample(tmp_path: Path) -> None:
    model = Linear(rows=100, batch_size=8)  # 100 = 12 full batches of 8 and a batch of 4
    trainer = make_trainer(tmp_path, strategy=IPUStrategy(device_iterations=2))
    # The last batch has another shape: poptorch compiles a second model for it, which costs a compile on IPUs.
    with pytest.warns(
        UserWarning, match=r"The last predict batch holds 4 samples instead of 16: poptorch compiles a second"
    ):
        predictions = trainer.predict(model, dataloaders=DataLoader(blobs(100), batch_size=8))
    assert predictions is not None
    assert sum(len(p) for p in predictions) == 100
    expected = model(blobs(100).tensors[0])
    torch.testing.assert_close(torch.cat(predictions), expected.detach())


def test_evaluation_batches_not_divisible_by_the_replicas_are_cut_with_a_warning(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, devices=4)
    with pytest.warns(UserWarning, match="An evaluation batch of 6 samples is cut to 4"):
        predictions = trainer.predict(Linear(), dataloaders=DataLoader(blobs(30), batch_size=3))
    assert predictions is not None
    assert sum(len(p) for p in predictions) == 28


@needs_cpu_float16
def test_16_true_converts_the_model(tmp_path: Path) -> None:
    model = Linear(rows=64)
    trainer = make_trainer(tmp_path, precision="16-true", limit_train_batches=2)
    trainer.fit(model)
    assert isinstance(trainer.precision_plugin, IPUPrecision)
    assert model.layer.weight.dtype == torch.float16


@pytest.mark.parametrize("precision", ["bf16-mixed", "64-true"])
def test_unsupported_precision_is_refused(tmp_path: Path, precision: str) -> None:
    with pytest.raises(ConfigurationError, match=f"precision='{precision}' is not supported on IPUs"):
        make_trainer(tmp_path, precision=precision)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"device_iterations": 0}, "device_iterations=0"),
        ({"autoreport": "yes"}, "autoreport='yes'"),
        ({"training_opts": {"deviceIterations": 2}}, "training_opts="),
    ],
)
def test_bad_strategy_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        IPUStrategy(**kwargs)


def test_without_poptorch_or_emulation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_accel.core.emulation import reset_emulation_settings

    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "0")
    reset_emulation_settings()
    assert not IPUAccelerator.is_available()
    with pytest.raises(Exception, match="LIGHTNING_ACCEL_EMULATE=ipu"):
        Trainer(accelerator=IPUAccelerator(), strategy=IPUStrategy(), devices=1, logger=False).fit(Linear())


def test_strategy_needs_the_ipu_accelerator(tmp_path: Path) -> None:
    trainer = Trainer(accelerator="cpu", strategy=IPUStrategy(), devices=1, logger=False, enable_checkpointing=False)
    with pytest.raises(ConfigurationError, match="IPUStrategy needs accelerator='ipu', got CPUAccelerator"):
        trainer.fit(Linear())
