"""Compiling for Gaudi the Lightning way: HPUCompile (whole or regional, from a step), compile_regions, options."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _habana_helpers import PYTHON, script_env
from lightning.fabric import Fabric
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana.compilation import HPUCompile, checked_options, compile_regions, repeated_blocks


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(self.norm(x)))


class Stack(LightningModule):
    def __init__(self, layers: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = torch.nn.Linear(8, 16)
        self.layers = torch.nn.ModuleList([Block(16) for _ in range(layers)])
        self.out = torch.nn.Linear(16, 1)
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for layer in self.layers:
            x = layer(x)
        return self.out(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _data() -> DataLoader:
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=16)


class _GraphsPerStep(Callback):
    """How many graphs dynamo had compiled after each training step."""

    def __init__(self) -> None:
        self.graphs: list[int] = []

    def on_train_batch_end(self, *args: Any) -> None:
        self.graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _fit(*callbacks: Callback, accelerator: str = "hpu") -> tuple[Stack, list[int]]:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model, spy = Stack(), _GraphsPerStep()
    Trainer(
        accelerator=accelerator,
        devices=1,
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[*callbacks, spy],
    ).fit(model, _data())
    return model, spy.graphs


@pytest.fixture(scope="module")
def eager_losses() -> list[float]:
    model, graphs = _fit()
    assert model.losses[-1] < 0.5 * model.losses[0]
    assert graphs[-1] == 0
    return model.losses


def test_whole_model_compile_trains_to_the_eager_losses(eager_mode: None, eager_losses: list[float]) -> None:
    model, graphs = _fit(HPUCompile())
    assert graphs[0] >= 1  # compiled from the first step
    assert model.losses == pytest.approx(eager_losses, rel=1e-4, abs=1e-5)


def test_regional_compile_compiles_one_block_once_and_trains_to_the_eager_losses(
    eager_mode: None, eager_losses: list[float]
) -> None:
    model, graphs = _fit(HPUCompile(regions=True))
    # Four blocks of one class: one graph, reused by the other three (the parts outside the blocks stay eager).
    assert graphs[-1] == 1
    assert all(layer._compiled_call_impl is not None for layer in model.layers)
    assert set(model.state_dict()) == set(Stack().state_dict())  # checkpoints keep their keys
    assert model.losses == pytest.approx(eager_losses, rel=1e-4, abs=1e-5)


def test_from_step_runs_the_first_steps_eagerly(eager_mode: None, eager_losses: list[float]) -> None:
    model, graphs = _fit(HPUCompile(regions=[Block], from_step=1))
    assert graphs[0] == 0 and graphs[1] == 1
    assert model.losses == pytest.approx(eager_losses, rel=1e-4, abs=1e-5)


def test_options_reach_hpu_backend_and_are_checked_against_its_settings(eager_mode: None) -> None:
    assert checked_options({"force_static_compile": True}) == {"force_static_compile": True}
    model, _ = _fit(HPUCompile(regions=True, options={"force_static_compile": True}))
    assert model.losses[-1] < model.losses[0]
    with pytest.raises(ConfigurationError) as error:
        _fit(HPUCompile(options={"force_static_compile_": True}))
    assert re.match(
        r"HPUCompile\(options=\.\.\.\) has 'force_static_compile_', which is not a setting of the SDK's hpu_backend\. "
        r"Accepted: .*force_static_compile, .*\(habana_frameworks\.torch\.dynamo\.compile_backend\.config\)\.",
        str(error.value),
    )
    with pytest.raises(ConfigurationError, match=r"\['inference'\]='no' is not accepted: the setting is a bool"):
        checked_options({"inference": "no"}, "HPUCompile(options=...)")


def test_bad_arguments_name_the_argument_and_what_is_accepted(eager_mode: None) -> None:
    with pytest.raises(ConfigurationError, match=r"HPUCompile\(from_step=-1\) is not accepted: the global step"):
        HPUCompile(from_step=-1)
    with pytest.raises(ConfigurationError, match=r"HPUCompile\(dynamic='yes'\) is not accepted: True, False or None"):
        HPUCompile(dynamic="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"HPUCompile\(regions=\.\.\.\)=\['Block'\] is not accepted"):
        HPUCompile(regions=["Block"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match=r"compile_regions found no repeated block in a ModuleList in Linear"):
        compile_regions(torch.nn.Linear(2, 2))
    with pytest.raises(ConfigurationError, match=r"HPUCompile compiles for the HPU, but this Trainer runs on 'cpu'"):
        _fit(HPUCompile(), accelerator="cpu")

    class NoForward(Stack):
        forward = LightningModule.forward  # type: ignore[assignment]

    trainer = Trainer(accelerator="hpu", devices=1, max_steps=1, logger=False, callbacks=[HPUCompile()])
    with pytest.raises(ConfigurationError, match=r"HPUCompile\(\) compiles the module's forward .* NoForward defines"):
        trainer.fit(NoForward(), _data())


def test_repeated_blocks_are_the_outermost_repeated_children_of_module_lists() -> None:
    outer = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.ModuleList([Block(2), Block(2)])) for _ in range(3)])
    blocks = repeated_blocks(torch.nn.Sequential(outer, torch.nn.ModuleList([Block(2)])))
    assert blocks == list(outer)  # the inner repeated Blocks are inside a block already; a lone Block is no repeat


def test_fabric_trains_a_regionally_compiled_model_like_eager(eager_mode: None) -> None:
    def run(regional: bool) -> list[float]:
        torch._dynamo.reset()
        fabric = Fabric(accelerator="hpu", devices=1)
        model = Stack()
        if regional:
            compile_regions(model, dynamic=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        model, optimizer = fabric.setup(model, optimizer)
        losses = []
        for x, y in fabric.setup_dataloaders(_data()):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            losses.append(loss.item())
        return losses

    assert run(True) == pytest.approx(run(False), rel=1e-4, abs=1e-5)


def test_hpu_backend_refuses_an_option_that_is_not_a_setting() -> None:
    code = (
        "import torch\n"
        "net = torch.compile(torch.nn.Linear(2, 2).to('hpu'), backend='hpu_backend', options={'no_such_setting': 1})\n"
        "net(torch.ones(1, 2, device='hpu'))\n"
    )
    done = subprocess.run([PYTHON, "-c", code], env=script_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert re.search(r"AttributeError: \S*compile_backend\.config\.no_such_setting does not exist", done.stderr)


def test_the_backend_settings_are_read_from_the_environment_when_the_sdk_loads() -> None:
    code = (
        "from lightning_accel.habana import sdk\n"
        "config = sdk.compile_backend_config()\n"
        "print(config.force_static_compile, config.decomposition_mode, config.configuration_flags['inference'])\n"
    )
    env = script_env(PT_HPU_FORCE_STATIC_COMPILE="TRUE", PT_HPU_COMPILE_DECOMPOSITION_MODE="core_aten")
    done = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["True", "core_aten", "True"], done.stderr[-2000:]
    env = script_env(PT_HPU_FORCE_STATIC_COMPILE="maybe")
    done = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "Unrecognized boolean value in env config:\n\tPT_HPU_FORCE_STATIC_COMPILE: maybe" in done.stderr


def _tokens() -> DataLoader:
    ids = torch.randint(0, 128, (32, 16), generator=torch.Generator().manual_seed(2))
    return DataLoader(TensorDataset(ids), batch_size=8)


class CausalLM(LightningModule):
    """A transformers causal LM from a config in code (nothing is downloaded)."""

    def __init__(self, family: str) -> None:
        super().__init__()
        transformers = pytest.importorskip("transformers")
        torch.manual_seed(0)
        if family == "gpt2":
            config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=16)
            self.lm = transformers.GPT2LMHeadModel(config)
        else:
            config = transformers.LlamaConfig(
                num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                num_key_value_heads=1, vocab_size=128, max_position_embeddings=16,
            )  # fmt: skip
            self.lm = transformers.LlamaForCausalLM(config)
        self.losses: list[float] = []

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=ids, labels=ids).loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self(batch[0])
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


@pytest.mark.parametrize(
    ("family", "regions"),
    [("gpt2", True), ("gpt2", False), ("llama", True), ("llama", False)],
    ids=["gpt2-regions", "gpt2-whole", "llama-regions", "llama-whole"],
)
def test_transformers_models_compiled_train_like_eager(eager_mode: None, family: str, regions: bool) -> None:
    def fit(*callbacks: Callback) -> list[float]:
        torch._dynamo.reset()
        model = CausalLM(family)
        Trainer(
            accelerator="hpu",
            devices=1,
            max_epochs=2,
            precision="bf16-mixed",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=list(callbacks),
        ).fit(model, _tokens())
        return model.losses

    eager = fit()
    assert eager[-1] < eager[0]
    # bf16 tolerance: the compiled graphs fuse (and so round) differently from the eager operations.
    assert fit(HPUCompile(regions=regions, from_step=0 if regions else 1)) == pytest.approx(eager, rel=2e-2)


def test_compiled_autograd_compiles_the_backward_and_trains_like_eager() -> None:
    # Process-wide once enabled (as the SDK's enable_compiled_autograd is): in a process of its own.
    code = (
        "import sys, torch\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_compilation import HPUCompile, _fit\n"
        "eager, _ = _fit()\n"
        "compiled, _ = _fit(HPUCompile(compiled_autograd=True))\n"
        "torch.testing.assert_close(compiled.losses, eager.losses, rtol=1e-4, atol=1e-5)\n"
        "print('backward graphs compiled:', torch._dynamo.utils.counters['compiled_autograd']['captures'])\n"
    )
    here = str(Path(__file__).parent)
    done = subprocess.run(
        [PYTHON, "-c", code, here], env=script_env(PT_HPU_LAZY_MODE="0"), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    captures = int(done.stdout.rsplit("backward graphs compiled:", 1)[1].split()[0])
    assert captures >= 1


@pytest.mark.parametrize(("flag", "enabled"), [("1", "True"), ("", "False")])
def test_the_sdk_turns_compiled_autograd_on_when_it_loads_with_its_flag(flag: str, enabled: str) -> None:
    code = (
        "import torch\n"
        "from lightning_accel.habana import sdk\n"
        "sdk.compile_backend_module()\n"
        "from torch._dynamo import compiled_autograd\n"
        "print(compiled_autograd.compiled_autograd_enabled)\n"
    )
    env = script_env(PT_HPU_LAZY_MODE="0", PT_HPU_ENABLE_COMPILED_AUTOGRAD=flag)
    done = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.split()[-1:] == [enabled], done.stderr[-2000:]


def test_lightning_cli_takes_hpu_compile_as_a_callback_with_its_arguments(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[3] / "examples" / "habana"
    args = [
        str(examples / "cli.py"),
        "fit",
        "--config",
        str(examples / "config.yaml"),
        "--trainer.callbacks+=lightning_accel.habana.HPUCompile",
        "--trainer.callbacks.from_step=1",
        '--trainer.callbacks.options={"force_static_compile": true}',
        "--trainer.max_epochs=1",
    ]
    env = script_env(PT_HPU_LAZY_MODE="0")
    done = subprocess.run([PYTHON, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.rsplit("final validation accuracy:", 1)[1].split()[0]) > 0.5
    bad = [*args[:-2], '--trainer.callbacks.options={"no_such_setting": 1}', "--trainer.max_epochs=1"]
    done = subprocess.run([PYTHON, *bad], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert (
        "HPUCompile(options=...) has 'no_such_setting', which is not a setting of the SDK's hpu_backend" in done.stderr
    )


@pytest.mark.parametrize("compiled", ["regions", "whole"])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_fabric_trains_a_compiled_transformer_like_eager(eager_mode: None, family: str, compiled: str) -> None:
    def run(compile_as: str | None) -> list[float]:
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        fabric = Fabric(accelerator="hpu", devices=1, precision="bf16-mixed")
        model: torch.nn.Module = CausalLM(family)
        optimizer = model.configure_optimizers()  # type: ignore[operator]
        if compile_as == "regions":
            blocks = compile_regions(model)
            assert len(blocks) == 2  # the two decoder layers (GPT-2's blocks)
        elif compile_as == "whole":
            # Fabric's way: compile, then set up (setup compiles the wrapped module again with the same arguments).
            model = torch.compile(model, backend="hpu_backend")
        model, optimizer = fabric.setup(model, optimizer)
        losses = []
        for _ in range(2):
            for (ids,) in fabric.setup_dataloaders(_tokens()):
                optimizer.zero_grad()
                loss = model(ids)
                fabric.backward(loss)
                optimizer.step()
                losses.append(loss.item())
        # What Dynamo compiled since the reset: nothing for eager, the model's graphs otherwise.
        assert (torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0) is (compile_as is not None)
        return losses

    eager = run(None)
    assert eager[-1] < eager[0]
    assert run(compiled) == pytest.approx(eager, rel=2e-2)
