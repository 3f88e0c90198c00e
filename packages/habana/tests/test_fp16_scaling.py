"""precision="16-mixed" on HPUs scales the loss as Lightning does on GPUs, with a scaler of operators the SDK has."""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.fabric import Fabric
from lightning.pytorch.plugins.precision import MixedPrecision

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUGradScaler, HPUPrecisionPlugin

QUIET: dict[str, Any] = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


class TinyLoss(pl.LightningModule):
    """A loss far below float16's smallest normal number once scaled by ``factor``: unscaled, its gradients vanish."""

    def __init__(self, factor: float = 1e-8, blow_up_at: int = -1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
        )
        self.factor = factor
        self.blow_up_at = blow_up_at
        self.zero_grads: list[int] = []
        self.finite: list[bool] = []
        self.scales: list[float] = []
        self.weights: list[torch.Tensor] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = self.net(batch).float().pow(2).mean() * self.factor
        if batch_idx == self.blow_up_at:
            loss = loss * math.inf
        return loss

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # After unscaling: the gradients the optimizer will use.
        grads = [p.grad for p in self.parameters()]
        self.zero_grads.append(sum(int(g.abs().sum().item() == 0) for g in grads))
        self.finite.append(all(bool(torch.isfinite(g).all()) for g in grads))
        self.weights.append(self.net[0].weight.detach().cpu().clone())

    def on_train_batch_end(self, *args: Any) -> None:
        scaler = self.trainer.precision_plugin.scaler
        self.scales.append(scaler.get_scale() if scaler is not None else 1.0)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _data() -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(torch.randn(64, 16, generator=torch.Generator().manual_seed(1)), batch_size=16)


def test_16_mixed_scales_the_loss_so_tiny_gradients_survive_float16() -> None:
    model = TinyLoss()
    trainer = pl.Trainer(accelerator="hpu", devices=1, precision="16-mixed", max_steps=4, **QUIET)
    trainer.fit(model, _data())
    assert isinstance(trainer.precision_plugin.scaler, HPUGradScaler)
    # The first step overflows at the default scale (65536 is above float16's largest value) and is skipped, as AMP's
    # first steps often are on GPUs; from then on every parameter gets finite, non-zero gradients.
    assert model.finite[1:] == [True, True, True]
    assert model.zero_grads[1:] == [0, 0, 0]
    assert model.scales == [2.0**15] * 4


def test_without_scaling_the_same_float16_gradients_vanish() -> None:
    model = TinyLoss()
    plugin = HPUPrecisionPlugin("16-mixed", scaler=HPUGradScaler(enabled=False))
    trainer = pl.Trainer(accelerator="hpu", devices=1, plugins=[plugin], max_steps=3, **QUIET)
    trainer.fit(model, _data())
    assert model.zero_grads == [6, 6, 6]  # every parameter: what precision="16-mixed" gave before loss scaling


def test_a_step_with_inf_gradients_is_skipped_and_the_scale_backs_off() -> None:
    # A scale whose scaled loss stays finite in float16 (65536 itself is above float16's largest value, 65504, so a
    # loss multiplied under the SDK's autocast overflows at the default scale and the first step backs off, as AMP
    # does on GPUs).
    model = TinyLoss(factor=1e-4, blow_up_at=1)
    plugin = HPUPrecisionPlugin("16-mixed", scaler=HPUGradScaler(init_scale=1024.0))
    trainer = pl.Trainer(accelerator="hpu", devices=1, plugins=[plugin], max_steps=3, **QUIET)
    trainer.fit(model, _data())
    first, skipped, third = model.scales
    assert (first, skipped, third) == (1024.0, 512.0, 512.0)
    after_skip = model.weights[2]
    before_skip = model.weights[1]
    assert torch.equal(after_skip, before_skip)  # the optimizer did not step on the inf gradients
    assert torch.isfinite(after_skip).all()


def test_the_scale_grows_after_growth_interval_clean_steps() -> None:
    scaler = HPUGradScaler(init_scale=4.0, growth_interval=2)
    model = TinyLoss(factor=1.0)
    trainer = pl.Trainer(
        accelerator="hpu", devices=1, max_steps=4, plugins=[HPUPrecisionPlugin("16-mixed", scaler=scaler)], **QUIET
    )
    trainer.fit(model, _data())
    assert model.scales == [4.0, 8.0, 8.0, 16.0]


def test_a_users_gradscaler_is_honoured_with_its_settings() -> None:
    users = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
    trainer = pl.Trainer(accelerator="hpu", devices=1, plugins=[MixedPrecision("16-mixed", "hpu", scaler=users)])
    scaler = trainer.precision_plugin.scaler
    assert isinstance(scaler, HPUGradScaler)
    assert (scaler.get_scale(), scaler.get_growth_interval()) == (1024.0, 7)


def test_a_scaler_with_bfloat16_is_refused_naming_the_precision_that_takes_one() -> None:
    with pytest.raises(ConfigurationError, match=r"scaler=HPUGradScaler was given with precision='bf16-mixed'"):
        HPUPrecisionPlugin("bf16-mixed", scaler=HPUGradScaler())


def test_fabric_backward_scales_the_loss_too() -> None:
    fabric = Fabric(accelerator="hpu", devices=1, precision="16-mixed")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    loss = model(torch.randn(16, 16, device=fabric.device)).float().pow(2).mean() * 1e-8
    fabric.backward(loss)
    fabric.strategy.precision.unscale_gradients(optimizer)
    assert all(p.grad.abs().sum().item() > 0 for p in model.parameters())
    optimizer.step()
    assert fabric.strategy.precision.scaler.get_scale() == 2.0**16
