"""Training with the Trainer on (emulated) HPUs: convergence, selection, evaluation mode, device stats, reduce."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _habana_helpers import digits_classifier, digits_loaders
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import DeviceStatsMonitor

import lightning_accel.habana  # noqa: F401  (registers the plugins before the registry is inspected)
from lightning_accel.core.testing.throughput import MemoryLogger
from lightning_accel.habana import HPUAccelerator, HPUParallelStrategy, SingleHPUStrategy

QUIET: dict[str, Any] = {"enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}


def test_fits_digits_with_instances() -> None:
    model = digits_classifier()
    train, val = digits_loaders()
    trainer = Trainer(
        accelerator=HPUAccelerator(), strategy=SingleHPUStrategy(), devices=1, max_epochs=6, logger=False, **QUIET
    )
    trainer.fit(model, train, val)
    assert isinstance(trainer.strategy, SingleHPUStrategy)
    assert trainer.strategy.root_device == torch.device("hpu")
    assert next(model.parameters()).device.type == "cpu"  # Lightning moves the model back to the host after fit
    assert trainer.callback_metrics["val_acc"] > 0.85


def test_evaluation_runs_under_no_grad_not_inference_mode() -> None:
    model = digits_classifier()
    train, val = digits_loaders()
    trainer = Trainer(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy(), max_steps=2, logger=False, **QUIET)
    trainer.fit(model, train, val)
    trainer.validate(model, val, verbose=False)
    trainer.test(model, val, verbose=False)
    trainer.predict(model, val)
    assert len(model.eval_grad_modes) >= 4
    assert set(model.eval_grad_modes) == {(False, False)}


@pytest.mark.emulator_only
def test_lazy_mode_marks_steps_after_backward_optimizer_and_around_evaluation(lazy_mode: None) -> None:
    from lightning_accel.habana_emulator import core as emulated_core  # the emulator's internals

    model = digits_classifier()
    train, val = digits_loaders()
    trainer = Trainer(
        accelerator=HPUAccelerator(),
        strategy=SingleHPUStrategy(),
        max_steps=3,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        logger=False,
        **QUIET,
    )
    before = emulated_core._marked_steps()
    trainer.fit(model, train)
    # 3 training steps x (after backward + after the optimizer step).
    assert emulated_core._marked_steps() - before == 3 * 2
    before = emulated_core._marked_steps()
    trainer.validate(model, val, verbose=False)
    # 2 validation steps x (before + after).
    assert emulated_core._marked_steps() - before == 2 * 2
    emulated_core._load_mode(False)  # an SDK loaded in eager mode: mark_step does nothing
    before = emulated_core._marked_steps()
    trainer.validate(model, val, verbose=False)
    assert emulated_core._marked_steps() == before


def test_parallel_devices_given_as_hpu_are_accepted() -> None:
    strategy = HPUParallelStrategy(parallel_devices=[torch.device("hpu")] * 2)
    trainer = Trainer(accelerator=HPUAccelerator(), strategy=strategy, devices=2, logger=False, **QUIET)
    assert trainer.strategy is strategy
    assert trainer.num_devices == 2
    assert strategy.root_device == torch.device("hpu")


def test_string_selection_single_device() -> None:
    trainer = Trainer(accelerator="hpu", devices=1, logger=False, **QUIET)
    assert isinstance(trainer.accelerator, HPUAccelerator)
    assert isinstance(trainer.strategy, SingleHPUStrategy)
    model = digits_classifier()
    train, val = digits_loaders()
    trainer = Trainer(accelerator="hpu", strategy="hpu_single", devices=1, max_epochs=6, logger=False, **QUIET)
    trainer.fit(model, train, val)
    assert trainer.callback_metrics["val_acc"] > 0.85


@pytest.mark.parametrize("name", ["hpu_parallel", "hpu_ddp"])
def test_string_selection_parallel(name: str) -> None:
    trainer = Trainer(accelerator="hpu", strategy=name, devices=2, logger=False, **QUIET)
    assert isinstance(trainer.strategy, HPUParallelStrategy)
    assert trainer.strategy._get_process_group_backend() == "hccl"
    auto = Trainer(accelerator="hpu", devices=2, logger=False, **QUIET)
    assert isinstance(auto.strategy, HPUParallelStrategy)


KEYS = (
    "Limit",
    "InUse",
    "MaxInUse",
    "NumAllocs",
    "NumFrees",
    "ActiveAllocs",
    "MaxAllocSize",
    "TotalSystemAllocs",
    "TotalSystemFrees",
    "TotalActiveAllocs",
)


def _device_stats(hidden: int) -> dict[str, float]:
    logger = MemoryLogger()
    train, _ = digits_loaders()
    trainer = Trainer(
        accelerator=HPUAccelerator(),
        strategy=SingleHPUStrategy(),
        max_steps=2,
        log_every_n_steps=1,
        callbacks=[DeviceStatsMonitor()],
        logger=logger,
        **QUIET,
    )
    trainer.fit(digits_classifier(hidden=hidden), train)
    prefix = "DeviceStatsMonitor.on_train_batch_end/"
    logged = [m for m in logger.logged if any(k.startswith(prefix) for k in m)]
    assert logged, "DeviceStatsMonitor logged nothing"
    return {key.removeprefix(prefix): value for key, value in logged[-1].items() if key.startswith(prefix)}


def test_device_stats_monitor_logs_ten_keys_that_move_with_the_model() -> None:
    small = _device_stats(hidden=16)
    assert set(small) == set(KEYS)
    big = _device_stats(hidden=16384)
    # The big model holds 64x16384 + 16384x10 float32 weights (4.9 MB), as much in gradients and twice that in Adam
    # moments. Other tests' tensors come and go in this process, so ask for only half of that growth.
    weights = 4 * (64 * 16384 + 16384 * 10)
    assert big["InUse"] >= small["InUse"] + 2 * weights
    assert big["MaxInUse"] >= big["InUse"]
    assert big["MaxAllocSize"] >= 4 * 64 * 16384
    assert big["NumAllocs"] > small["NumAllocs"]
    assert big["Limit"] > 0


def test_reduce_rejects_unsupported_operations() -> None:
    strategy = HPUParallelStrategy()
    value = torch.tensor(3.0)
    assert strategy.reduce(value, reduce_op="sum") is value  # a single process passes the tensor through
    with pytest.raises(ValueError) as info:
        strategy.reduce(value, reduce_op="product")
    assert str(info.value) == (
        "reduce_op='product' is not supported on HPU. Accepted: 'sum', 'mean' (or 'avg'), 'min', 'max', or the "
        "matching torch.distributed.ReduceOp."
    )
    with pytest.raises(ValueError, match=r"reduce_op=<RedOpType.PRODUCT: \d+> is not supported on HPU"):
        strategy.reduce(value, reduce_op=torch.distributed.ReduceOp.PRODUCT)
