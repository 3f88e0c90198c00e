"""Hyper-parameter schedules on IPUs: what poptorch compiles as a constant, what may change, and the errors.

poptorch compiles every hyper-parameter of a ``poptorch.optim`` optimizer that was not passed to its constructor as
a constant, and PopART refuses a later change of one ("Values are constant but do not match.").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from ipu_models import Linear, blobs
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.pycompat import strict_zip
from lightning_accel.graphcore import IPUAccelerator, IPUStrategy
from lightning_accel.graphcore.sdk import poptorch

STEPS = 6


class Scheduled(Linear):
    """No shuffling, no validation; the optimizer (and scheduler) come from ``make``."""

    def __init__(self, make: Callable[[LightningModule], Any]) -> None:
        super().__init__(rows=64, batch_size=4)
        self.make = make

    def configure_optimizers(self) -> Any:
        return self.make(self)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(self.rows), batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self) -> Any:
        return []


class WeightDecaySchedule(Callback):
    """Raises every group's weight decay before each step (a schedule Lightning has no scheduler for)."""

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        for group in trainer.optimizers[0].param_groups:
            group["weight_decay"] = 0.01 * (batch_idx + 1)


class MomentumSchedule(Callback):
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        for group in trainer.optimizers[0].param_groups:
            group["momentum"] = 0.5 if batch_idx else group["momentum"]


def one_cycle_sgd(module: LightningModule) -> Any:
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    # cycle_momentum (the default) moves momentum between 0.85 and 0.95 every step.
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.5, total_steps=STEPS)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def one_cycle_adam(module: LightningModule) -> Any:
    optimizer = torch.optim.Adam(module.parameters(), lr=0.01)
    # On Adam, cycle_momentum cycles beta1, which poptorch compiles as a constant of a torch optimizer.
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.05, total_steps=STEPS)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def cyclic_sgd_from_zero_momentum(module: LightningModule) -> Any:
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    # CyclicLR sets momentum (0.8 to 0.9) although the optimizer starts at momentum 0.
    scheduler = torch.optim.lr_scheduler.CyclicLR(optimizer, base_lr=0.05, max_lr=0.3, step_size_up=2)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def decayed_sgd(module: LightningModule) -> Any:
    return torch.optim.SGD(module.parameters(), lr=0.1, weight_decay=0.001)


def decayed_adamw_betas_list(module: LightningModule) -> Any:
    optimizer = torch.optim.AdamW(module.parameters(), lr=0.01)
    for group in optimizer.param_groups:
        group["betas"] = [0.8, 0.99]  # as a YAML/Hydra config gives it
    return optimizer


def fit(accelerator: str, make: Callable[[LightningModule], Any], tmp_path: Path, callbacks: Any = ()) -> Linear:
    seed_everything(0)
    model = Scheduled(make)
    options: dict[str, Any] = {"accelerator": accelerator, "devices": 1}
    if accelerator == "ipu":
        options = {"accelerator": IPUAccelerator(), "strategy": IPUStrategy(), "devices": 1}
    trainer = Trainer(
        **options,
        default_root_dir=str(tmp_path / accelerator),
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
    )
    trainer.fit(model)
    return model


@pytest.mark.parametrize(
    ("make", "callbacks"),
    [
        pytest.param(one_cycle_sgd, (), id="OneCycleLR-SGD-momentum"),
        pytest.param(one_cycle_adam, (), id="OneCycleLR-Adam-betas"),
        pytest.param(cyclic_sgd_from_zero_momentum, (), id="CyclicLR-SGD"),
        pytest.param(decayed_sgd, (WeightDecaySchedule(),), id="weight-decay-schedule"),
        pytest.param(decayed_adamw_betas_list, (WeightDecaySchedule(),), id="AdamW-betas-list"),
    ],
)
def test_schedules_train_as_on_the_cpu(make: Any, callbacks: Any, tmp_path: Path) -> None:
    on_ipu = fit("ipu", make, tmp_path, callbacks)
    on_cpu = fit("cpu", make, tmp_path, callbacks)
    seed_everything(0)
    initial = Scheduled(make)
    assert not torch.allclose(initial.layer.weight, on_cpu.layer.weight)
    for got, want in strict_zip(on_ipu.parameters(), on_cpu.parameters()):
        torch.testing.assert_close(got, want)


def test_a_changed_constant_of_a_poptorch_optimizer_names_it_and_the_fix(tmp_path: Path) -> None:
    def make(module: LightningModule) -> Any:
        return poptorch.optim.SGD(module.parameters(), lr=0.1, momentum=0.0)  # momentum passed: variable

    # Passed explicitly, momentum may change.
    fit("ipu", make, tmp_path, (MomentumSchedule(),))

    def constant(module: LightningModule) -> Any:
        return poptorch.optim.SGD(module.parameters(), lr=0.1)  # momentum not passed: a constant 0

    with pytest.raises(ConfigurationError) as raised:
        fit("ipu", constant, tmp_path, (MomentumSchedule(),))
    message = str(raised.value)
    assert re.search(r"momentum changed from 0(\.0)? to 0\.5 \(parameter group 0\)", message)
    assert "Values are constant but do not match" in message or "non constant" in message
    assert "markAsVariable('momentum')" in message


def test_a_zero_momentum_changed_by_a_callback_names_it_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"momentum changed from 0(\.0)? to 0\.5 .* non-zero starting value"):
        fit("ipu", lambda m: torch.optim.SGD(m.parameters(), lr=0.1), tmp_path, (MomentumSchedule(),))


def test_betas_as_a_list_in_a_poptorch_optimizer_are_refused_with_the_fix(tmp_path: Path) -> None:
    def make(module: LightningModule) -> Any:
        optimizer = poptorch.optim.Adam(module.parameters(), lr=0.01)
        optimizer.param_groups[0]["betas"] = [0.9, 0.99]
        return optimizer

    with pytest.raises(ConfigurationError, match=r"betas=\[0\.9, 0\.99\] \(a list.*betas=tuple"):
        fit("ipu", make, tmp_path)


def test_gradient_ascent_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"SGD\(maximize=True\) is not supported on IPUs"):
        fit("ipu", lambda m: torch.optim.SGD(m.parameters(), lr=0.1, maximize=True), tmp_path)


def test_trainable_weights_outside_the_optimizer_are_refused(tmp_path: Path) -> None:
    class Partial(Scheduled):
        def __init__(self) -> None:
            super().__init__(lambda m: torch.optim.SGD(m.layer.parameters(), lr=0.1))
            self.extra = torch.nn.Linear(5, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x) + self.extra(x)

    model = Partial()
    trainer = Trainer(
        accelerator=IPUAccelerator(),
        strategy=IPUStrategy(),
        devices=1,
        max_steps=1,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    with pytest.raises(
        ConfigurationError, match=r"trainable parameters extra\.weight, extra\.bias are not in the optimizer"
    ):
        trainer.fit(model)
    # Frozen, they are fine: poptorch trains only weights that require gradients.
    model.extra.requires_grad_(False)
    frozen = model.extra.weight.detach().clone()
    trainer = Trainer(
        accelerator=IPUAccelerator(),
        strategy=IPUStrategy(),
        devices=1,
        max_steps=2,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    trainer.fit(model)
    torch.testing.assert_close(model.extra.weight, frozen)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda m: poptorch.optim.LAMB(m.parameters(), lr=0.05, accum_type=torch.float16), id="LAMB"),
        pytest.param(
            lambda m: poptorch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, use_combined_accum=True),
            id="SGD-combined",
        ),
    ],
)
def test_a_users_poptorch_optimizer_is_used_as_it_is(make: Any, tmp_path: Path) -> None:
    on_ipu = fit("ipu", make, tmp_path)
    optimizer = on_ipu.trainer.optimizers[0]
    # The strategy handed poptorch the user's optimizer itself: its device state is there, under PopART's names.
    assert optimizer.state_dict()["ipu_state"], "the user's optimizer was not the one poptorch ran"
    if isinstance(optimizer, poptorch.optim.LAMB):
        assert optimizer.accum_type == torch.float16
    # On the CPU the same poptorch.optim class is a torch optimizer: the weights must agree.
    on_cpu = fit("cpu", make, tmp_path)
    for got, want in strict_zip(on_ipu.parameters(), on_cpu.parameters()):
        torch.testing.assert_close(got, want)


def test_a_host_checkpoint_resumes_a_users_poptorch_optimizer_with_a_warning(tmp_path: Path) -> None:
    class Switching(Scheduled):
        """torch's SGD on the CPU, poptorch's on IPUs (as a script that picks the optimizer per device would)."""

        def __init__(self) -> None:
            super().__init__(self.choose)

        def choose(self, module: LightningModule) -> Any:
            kind = poptorch.optim.SGD if isinstance(self.trainer.accelerator, IPUAccelerator) else torch.optim.SGD
            optimizer = kind(module.parameters(), lr=0.1, momentum=0.9)
            return {
                "optimizer": optimizer,
                "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5),
            }

    options: dict[str, Any] = {"logger": False, "enable_progress_bar": False, "default_root_dir": str(tmp_path)}
    cpu = Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=2, **options)
    cpu.fit(Switching())
    path = tmp_path / "host.ckpt"
    cpu.save_checkpoint(path)
    model = Switching()
    ipu = Trainer(accelerator=IPUAccelerator(), strategy=IPUStrategy(), max_epochs=2, limit_train_batches=2, **options)
    with pytest.warns(UserWarning, match=r"saved by a torch optimizer on the host \(no 'ipu_state'\)"):
        ipu.fit(model, ckpt_path=path)
    # The torch part came through: the scheduler's halving continued from the CPU run's epoch.
    assert ipu.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**2)
