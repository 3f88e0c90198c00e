"""Lightning's own strategy names and classes with accelerator="hpu": a script written for GPUs changes only that."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
from lightning.fabric import Fabric
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUFSDPStrategy, HPUParallelStrategy, SingleHPUStrategy
from lightning_accel.habana.fabric import HPUParallelStrategy as FabricHPUParallelStrategy

QUIET: dict[str, Any] = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


@pytest.mark.parametrize(
    ("name", "devices", "expected", "start_method", "ddp_kwargs"),
    [
        ("ddp", 2, HPUParallelStrategy, "popen", {}),
        ("ddp_spawn", 2, HPUParallelStrategy, "spawn", {}),
        ("ddp_fork", 2, HPUParallelStrategy, "fork", {}),
        ("ddp_notebook", 2, HPUParallelStrategy, "fork", {}),
        ("ddp_find_unused_parameters_true", 2, HPUParallelStrategy, "popen", {"find_unused_parameters": True}),
        ("ddp_spawn_find_unused_parameters_false", 2, HPUParallelStrategy, "spawn", {"find_unused_parameters": False}),
        ("fsdp", 2, HPUFSDPStrategy, None, None),
        ("single_device", 1, SingleHPUStrategy, None, None),
    ],
)
def test_lightnings_strategy_names_select_the_hpu_strategies_with_the_same_arguments(
    name: str, devices: int, expected: type, start_method: str | None, ddp_kwargs: dict[str, Any] | None
) -> None:
    trainer = pl.Trainer(accelerator="hpu", devices=devices, strategy=name, **QUIET)
    assert type(trainer.strategy) is expected
    assert trainer.strategy.root_device.type == "hpu"
    if start_method is not None:
        assert trainer.strategy._start_method == start_method
        assert trainer.strategy._ddp_kwargs == ddp_kwargs
        assert trainer.strategy.process_group_backend == "hccl"


def test_fsdp_cpu_offload_keeps_its_offload_on_hpus() -> None:
    trainer = pl.Trainer(accelerator="hpu", devices=2, strategy="fsdp_cpu_offload", **QUIET)
    assert type(trainer.strategy) is HPUFSDPStrategy
    assert trainer.strategy.cpu_offload.offload_params is True


@pytest.mark.parametrize(("name", "start_method"), [("ddp", "popen"), ("ddp_spawn", "spawn")])
def test_fabric_takes_lightnings_names_on_hpus_too(name: str, start_method: str) -> None:
    fabric = Fabric(accelerator="hpu", devices=2, strategy=name)
    assert type(fabric.strategy) is FabricHPUParallelStrategy
    assert fabric.strategy._start_method == start_method


def test_a_lightning_strategy_without_an_hpu_counterpart_is_refused_naming_what_is_accepted() -> None:
    with pytest.raises(ConfigurationError) as refused:
        pl.Trainer(accelerator="hpu", devices=2, strategy="xla", **QUIET)
    message = str(refused.value)
    assert message.startswith(
        "strategy='xla' is Lightning's XLAStrategy, which has no counterpart on accelerator='hpu'. Accepted with it: "
        "Lightning's names 'ddp', "
    )
    assert (
        "or the HPU strategies 'hpu_ddp', 'hpu_fast_ddp', 'hpu_fsdp', 'hpu_model_parallel', 'hpu_parallel', "
        "'hpu_single'" in message
    )


def test_an_instance_of_lightnings_ddp_becomes_the_hpu_strategy_with_its_arguments() -> None:
    from datetime import timedelta

    from lightning.fabric.strategies import DDPStrategy as FabricDDPStrategy
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    given = DDPStrategy(
        find_unused_parameters=True,
        static_graph=True,
        start_method="spawn",
        timeout=timedelta(minutes=7),
        ddp_comm_hook=default_hooks.bf16_compress_hook,
    )
    trainer = pl.Trainer(accelerator="hpu", devices=2, strategy=given, precision="bf16-mixed", **QUIET)
    strategy = trainer.strategy
    assert type(strategy) is HPUParallelStrategy
    assert strategy._ddp_kwargs == {"find_unused_parameters": True, "static_graph": True}
    assert (strategy._start_method, strategy._timeout) == ("spawn", timedelta(minutes=7))
    assert strategy._ddp_comm_hook is default_hooks.bf16_compress_hook
    assert strategy.process_group_backend == "hccl"
    assert type(strategy.precision_plugin).__name__ == "HPUPrecisionPlugin"

    fabric = Fabric(accelerator="hpu", devices=2, strategy=FabricDDPStrategy(find_unused_parameters=True))
    assert type(fabric.strategy) is FabricHPUParallelStrategy
    assert fabric.strategy._ddp_kwargs == {"find_unused_parameters": True}


def test_an_instance_with_another_process_group_backend_is_refused() -> None:
    match = (
        r"DDPStrategy\(process_group_backend='nccl'\) does not run on HPUs\. Accepted: process_group_backend='hccl' "
        r"or None \(HCCL, Gaudi's collective library\)\."
    )
    with pytest.raises(ConfigurationError, match=match):
        pl.Trainer(accelerator="hpu", devices=2, strategy=DDPStrategy(process_group_backend="nccl"), **QUIET)


def test_an_instance_of_lightnings_fsdp_becomes_the_hpu_strategy_with_its_arguments() -> None:
    import torch
    from lightning.fabric.strategies import FSDPStrategy as FabricFSDPStrategy
    from torch.distributed.fsdp import ShardingStrategy

    given = FSDPStrategy(
        auto_wrap_policy={torch.nn.Linear},
        activation_checkpointing_policy={torch.nn.Linear},
        sharding_strategy="SHARD_GRAD_OP",
        state_dict_type="sharded",
        cpu_offload=True,
        limit_all_gathers=False,
    )
    trainer = pl.Trainer(accelerator="hpu", devices=2, strategy=given, precision="bf16-mixed", **QUIET)
    strategy = trainer.strategy
    assert type(strategy) is HPUFSDPStrategy
    assert strategy.sharding_strategy == ShardingStrategy.SHARD_GRAD_OP
    assert strategy.kwargs["auto_wrap_policy"] is given.kwargs["auto_wrap_policy"]
    assert strategy.kwargs["limit_all_gathers"] is False
    assert strategy._activation_checkpointing_kwargs == given._activation_checkpointing_kwargs
    assert (strategy._state_dict_type, strategy.cpu_offload.offload_params) == ("sharded", True)
    assert strategy.process_group_backend == "hccl"
    assert type(strategy.precision_plugin).__name__ == "HPUFSDPPrecision"

    fabric = Fabric(accelerator="hpu", devices=2, strategy=FabricFSDPStrategy(sharding_strategy="NO_SHARD"))
    assert type(fabric.strategy).__name__ == "HPUFSDPStrategy"
    assert fabric.strategy.sharding_strategy == ShardingStrategy.NO_SHARD


def test_cpu_keeps_lightnings_own_strategies() -> None:
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", **QUIET)
    assert type(trainer.strategy) is DDPStrategy


@pytest.fixture
def notebook(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interactive session, as Lightning's own tests make one."""
    import lightning.fabric.connector as fabric_connector
    import lightning.pytorch.trainer.connectors.accelerator_connector as trainer_connector

    monkeypatch.setattr(trainer_connector, "_IS_INTERACTIVE", True)
    monkeypatch.setattr(fabric_connector, "_IS_INTERACTIVE", True)


def test_a_notebook_takes_one_hpu_by_default_as_lightning_does_for_gpus(notebook: None) -> None:
    trainer = pl.Trainer(accelerator="hpu", **QUIET)
    assert trainer.num_devices == 1
    assert type(trainer.strategy) is SingleHPUStrategy
    assert Fabric(accelerator="hpu").world_size == 1


def test_a_notebook_with_several_hpus_starts_them_by_fork_as_lightning_does_for_gpus(notebook: None) -> None:
    trainer = pl.Trainer(accelerator="hpu", devices=2, **QUIET)
    assert type(trainer.strategy) is HPUParallelStrategy
    assert trainer.strategy._start_method == "fork"
    fabric = Fabric(accelerator="hpu", devices=2)
    assert fabric.strategy._start_method == "fork"
    # Lightning's suggestion for notebooks selects the same.
    assert pl.Trainer(accelerator="hpu", devices=2, strategy="ddp_notebook", **QUIET).strategy._start_method == "fork"


def _run_script(code: str) -> str:
    """Run ``code`` in a fresh interpreter of its own (the processes it starts are real); returns its output."""
    import subprocess

    from _habana_helpers import PYTHON, free_port, script_env

    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    done = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


NOTEBOOK_FIT = """
import lightning.pytorch.trainer.connectors.accelerator_connector as connector
connector._IS_INTERACTIVE = True  # what Lightning sees in a notebook
import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel

class Counted(BoringModel):
    def on_train_end(self):
        print(f"RANK {self.global_rank} TRAINED {self.trainer.global_step} STEPS", flush=True)

quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer = pl.Trainer(accelerator="hpu", devices=2, max_steps=3, **quiet)
trainer.fit(Counted())
print("STARTED BY", trainer.strategy._start_method)
"""


@pytest.mark.slow
def test_two_hpus_train_from_a_notebook_started_by_fork() -> None:
    stdout = _run_script(NOTEBOOK_FIT)
    assert "RANK 0 TRAINED 3 STEPS" in stdout and "RANK 1 TRAINED 3 STEPS" in stdout
    assert "STARTED BY fork" in stdout


def test_on_gaudi_hardware_a_gpu_scripts_ddp_without_accelerator_selects_the_hpu_strategy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # accelerator="auto" (Lightning's default) picks the HPU where Gaudi hardware is found; Lightning's names then
    # select the HPU strategies as they do with accelerator="hpu".
    import lightning_accel.habana.availability as availability
    from lightning_accel.core.plugin import Availability

    monkeypatch.setattr(availability, "availability", lambda: Availability("hardware", "8 Gaudi cards (test)", 8))
    trainer = pl.Trainer(strategy="ddp", devices=2, **QUIET)
    assert trainer.accelerator.__class__.__name__ == "HPUAccelerator"
    assert type(trainer.strategy) is HPUParallelStrategy


SYNC_BATCHNORM_FIT = """
import lightning.pytorch as pl
import torch
from lightning.pytorch.demos.boring_classes import BoringModel

class WithBatchNorm(BoringModel):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(32)

    def forward(self, x):
        return self.layer(self.norm(x))

    def on_train_end(self):
        print(f"RANK {self.global_rank} {type(self.norm).__name__} {self.trainer.global_step}", flush=True)

quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer = pl.Trainer(accelerator="hpu", devices=2, strategy="ddp_fork", sync_batchnorm=True, max_steps=3, **quiet)
trainer.fit(WithBatchNorm(), torch.utils.data.DataLoader(torch.randn(64, 32), batch_size=8))
"""


@pytest.mark.slow
def test_sync_batchnorm_trains_on_two_hpus() -> None:
    stdout = _run_script(SYNC_BATCHNORM_FIT)
    assert "RANK 0 SyncBatchNorm 3" in stdout and "RANK 1 SyncBatchNorm 3" in stdout


def _hpu_twins_and_lightnings_classes() -> list[tuple[type, type]]:
    from lightning.fabric import strategies as fabric_strategies

    from lightning_accel.habana import fabric as hpu_fabric

    return [
        (HPUParallelStrategy, DDPStrategy),
        (HPUFSDPStrategy, FSDPStrategy),
        (hpu_fabric.HPUParallelStrategy, fabric_strategies.DDPStrategy),
        (hpu_fabric.HPUFSDPStrategy, fabric_strategies.FSDPStrategy),
    ]


@pytest.mark.parametrize(("hpu_class", "lightning_class"), _hpu_twins_and_lightnings_classes())
def test_the_data_parallel_hpu_strategies_take_lightnings_constructor(hpu_class: type, lightning_class: type) -> None:
    import inspect

    # What LightningCLI, IDEs and help() read: Lightning's own arguments, so a new one in Lightning reaches ours.
    assert inspect.signature(hpu_class) == inspect.signature(lightning_class)
    strategy = hpu_class(timeout=timedelta(minutes=3))
    assert strategy.process_group_backend == "hccl"
    assert strategy._timeout == timedelta(minutes=3)


# Lightning 2.6's LightningCLI calls a jsonargparse method jsonargparse 4.53 deprecates (not ours to change).
@pytest.mark.filterwarnings("ignore::jsonargparse._deprecated.JsonargparseDeprecationWarning")
def test_lightning_cli_builds_the_hpu_fsdp_strategy_from_a_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.demos.boring_classes import BoringModel
    from torch.distributed.fsdp import ShardingStrategy

    strategy = {
        "class_path": "lightning_accel.habana.HPUFSDPStrategy",
        "init_args": {"sharding_strategy": "SHARD_GRAD_OP", "state_dict_type": "sharded", "cpu_offload": True},
    }
    trainer = {"accelerator": "hpu", "devices": 2, "strategy": strategy, "default_root_dir": str(tmp_path), **QUIET}
    monkeypatch.setattr("sys.argv", ["train.py"])
    cli = LightningCLI(BoringModel, args={"trainer": trainer}, run=False, save_config_callback=None)
    built = cli.trainer.strategy
    assert type(built) is HPUFSDPStrategy
    assert (built.sharding_strategy, built._state_dict_type) == (ShardingStrategy.SHARD_GRAD_OP, "sharded")
    assert built.cpu_offload.offload_params is True
    assert built.process_group_backend == "hccl"
