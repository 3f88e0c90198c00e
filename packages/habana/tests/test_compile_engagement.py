"""Compile and graph features that engage or say why not: each case here once ran silently doing nothing."""

from __future__ import annotations

import subprocess
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _habana_helpers import PYTHON, script_env
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUCompile, HPUGraphs
from lightning_accel.habana.compilation import compile_regions, compiled_frames, without_kv_cache
from lightning_accel.habana.compile_metrics import CompileMetricsTracker
from lightning_accel.habana.graphs import check_graphed_callables


def _data(width: int = 16, rows: int = 64, batch_size: int = 16) -> DataLoader:
    x = torch.randn(rows, 4, width, generator=torch.Generator().manual_seed(1))
    return DataLoader(TensorDataset(x, x.mean(dim=(1, 2)).unsqueeze(1)), batch_size=batch_size)


class Net(LightningModule):
    """Built-in torch.nn blocks in a ModuleList; ``through_forward=False`` calls ``self.net`` from the step."""

    def __init__(self, kind: str, through_forward: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        if kind == "encoder":
            make = lambda: torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)  # noqa: E731
        else:
            make = lambda: torch.nn.Linear(16, 16)  # noqa: E731
        self.net = torch.nn.Sequential(torch.nn.ModuleList([make() for _ in range(3)]))
        self.head = torch.nn.Linear(16, 1)
        self.through_forward = through_forward
        self.losses: list[float] = []

    def run(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.net[0]:
            x = layer(x)
        return self.head(x).mean(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x) if self.through_forward else self.run(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class _Frames(Callback):
    """Dynamo's compiled frames from the start of the fit."""

    def on_fit_start(self, *args: Any) -> None:
        records = torch._dynamo.utils.get_compilation_metrics()
        self.since = records[-1] if records else None

    def on_fit_end(self, *args: Any) -> None:
        self.frames = compiled_frames(self.since)


def _trainer(*callbacks: Callback, **kwargs: Any) -> Trainer:
    return Trainer(
        accelerator="hpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
        **kwargs,
    )


def _fit(model: LightningModule, *callbacks: Callback, **kwargs: Any) -> tuple[int, list[str]]:
    """Fit two epochs from empty Dynamo caches; the frames Dynamo compiled and the warnings' texts."""
    torch._dynamo.reset()
    frames = _Frames()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(*callbacks, frames, max_epochs=2, **kwargs).fit(model, _data())
    return frames.frames, [str(w.message) for w in caught]


@pytest.mark.parametrize("kind", ["encoder", "linear"])
def test_regional_compile_of_torch_nn_blocks_compiles_them_and_trains_like_eager(eager_mode: None, kind: str) -> None:
    eager = Net(kind)
    _fit(eager)
    model = Net(kind)
    frames, caught = _fit(model, HPUCompile(regions=True))
    assert frames >= 1  # Module.compile alone compiles nothing for a torch.nn block: Dynamo skips torch.nn's files
    assert not [w for w in caught if "nothing was compiled" in w]
    assert set(model.state_dict()) == set(Net(kind).state_dict())  # checkpoints keep their keys
    assert model.losses == pytest.approx(eager.losses, rel=1e-4, abs=1e-5)


def test_compile_regions_compiles_linear_blocks_once_for_all(eager_mode: None) -> None:
    torch._dynamo.reset()
    layers = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(6)])).to("hpu")
    compile_regions(layers)
    since = (torch._dynamo.utils.get_compilation_metrics() or [None])[-1]
    x = torch.randn(4, 8, device="hpu", requires_grad=True)  # as the blocks' outputs: no recompilation for that
    for layer in layers[0]:
        x = layer(x)
    assert compiled_frames(since) == 1  # six blocks of one class: one graph


def test_whole_model_compile_warns_when_the_step_calls_a_submodule_directly(eager_mode: None) -> None:
    frames, caught = _fit(Net("linear", through_forward=False), HPUCompile())
    assert frames == 0
    (message,) = [w for w in caught if "nothing was compiled" in w]
    assert message.startswith(
        "HPUCompile() compiled Net.forward (what self(...) runs), but the first compiled training"
    )
    assert "never called it: a step that calls a submodule directly (self.net(...), self.model(...))" in message
    assert "Call self(...) in the steps" in message


def test_whole_model_compile_through_self_gives_no_warning(eager_mode: None) -> None:
    frames, caught = _fit(Net("linear"), HPUCompile())
    assert frames >= 1
    assert not [w for w in caught if "nothing was compiled" in w]


@pytest.mark.parametrize("order", ["compile-first", "graphs-first"])
def test_hpu_compile_with_hpu_graphs_is_refused_before_the_run(lazy_mode: None, order: str) -> None:
    callbacks: list[Callback] = [HPUCompile(regions=True), HPUGraphs(stages=("fit",))]
    if order == "graphs-first":
        callbacks.reverse()
    model = Net("linear")
    with pytest.raises(ConfigurationError, match=r"^HPUCompile and HPUGraphs are both callbacks of this Trainer"):
        _trainer(*callbacks, max_epochs=1).fit(model, _data())
    assert model.losses == []  # refused before any step


def _limit_hitting_run() -> CompileMetricsTracker:
    torch._dynamo.reset()

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2

    compiled = torch.compile(scaled, backend="hpu_backend", dynamic=False)
    tracker = CompileMetricsTracker(warmup_steps=100)
    with torch._dynamo.config.patch(recompile_limit=2):
        for rows in range(1, 6):
            batch = torch.randn(rows, 3, device="hpu")
            compiled(batch)
            tracker.step(batch)
    return tracker


def test_the_metrics_report_a_recompile_limit_fallback_with_the_function_name(eager_mode: None) -> None:
    with pytest.warns(UserWarning, match=r"Dynamo recompile limit: step 2: scaled hit Dynamo's recompile limit") as w:
        tracker = _limit_hitting_run()
    (hit,) = [r for r in tracker.recompilations if r.hit_limit]
    assert hit.function == "scaled"
    assert hit.limit == "torch._dynamo.config.recompile_limit=2"
    assert "size mismatch at index 0" in hit.reason
    assert "Each later call of scaled runs eagerly" in str(w[0].message)
    last = tracker.step()
    assert last["compile/recompile_limit_hits_total"] == 1.0
    assert last["compile/recompilations_total"] == 1.0  # the one recompilation before the limit


_RECIPE_CACHE_SCRIPT = """
import torch
from lightning_accel.habana.compile_metrics import CompileMetricsTracker
from lightning_accel.habana.sdk import htcore
tracker = CompileMetricsTracker(warmup_steps=100)
w = torch.randn(8, 8).to("hpu")
for step in range(4):
    (torch.randn(4, 8).to("hpu") @ w).relu().sum().item()
    htcore.mark_step()
    logged = tracker.step()
print(sorted(k for k in logged if "recipe" in k))
print(logged.get("compile/recipe_cache_hits_total"), logged.get("compile/recipe_cache_misses_total"))
"""


@pytest.mark.emulator_only  # the emulator emits recipe-cache lookups for lazy-mode graphs only
def test_the_metrics_count_recipe_cache_hits_and_misses_when_the_sdk_publishes_them() -> None:
    env = script_env(PT_HPU_LAZY_MODE="1", PT_HPU_ENABLE_CACHE_METRICS="1")
    done = subprocess.run([PYTHON, "-c", _RECIPE_CACHE_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    keys, counts = done.stdout.strip().splitlines()[-2:]
    assert keys == str(
        [
            "compile/recipe_cache_hits",
            "compile/recipe_cache_hits_total",
            "compile/recipe_cache_misses",
            "compile/recipe_cache_misses_total",
        ]
    ), done.stderr[-2000:]
    hits, misses = (float(v) for v in counts.split())
    assert misses >= 1 and hits >= 1  # the first step's graph is a miss, the same graph later a hit
    env = script_env(PT_HPU_LAZY_MODE="1")
    done = subprocess.run([PYTHON, "-c", _RECIPE_CACHE_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip().splitlines()[-2:] == ["[]", "None None"], done.stderr[-2000:]
    assert "the SDK registers its recipe_cache metric only when it loads with PT_HPU_ENABLE_CACHE_METRICS=1" in (
        done.stdout + done.stderr
    )


class CausalLM(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        transformers = pytest.importorskip("transformers")
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            num_hidden_layers=3, hidden_size=32, intermediate_size=64, num_attention_heads=2,
            num_key_value_heads=1, vocab_size=128, max_position_embeddings=16,
        )  # fmt: skip
        self.lm = transformers.LlamaForCausalLM(config)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=ids, labels=ids).loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def test_regional_compile_of_a_transformers_model_trains_without_its_kv_cache_and_restores_it(
    eager_mode: None,
) -> None:
    from lightning_accel.habana import HPUCompileMetrics

    torch._dynamo.reset()
    model, metrics = CausalLM(), HPUCompileMetrics(warmup_steps=100)
    assert model.lm.config.use_cache is True
    ids = torch.randint(0, 128, (16, 16), generator=torch.Generator().manual_seed(2))
    _trainer(HPUCompile(regions=True), metrics, max_epochs=1).fit(model, DataLoader(TensorDataset(ids), batch_size=8))
    # With the cache on, each layer's cache entry failed the guards of the one before (layers[i].is_initialized).
    assert metrics.recompilations == []
    assert model.lm.config.use_cache is True  # restored after the fit


def test_compile_regions_warns_about_a_training_model_that_keeps_its_kv_cache(eager_mode: None) -> None:
    model = CausalLM().lm
    with pytest.warns(
        UserWarning, match=r"LlamaForCausalLM keeps a KV cache \(config.use_cache=True\) while it trains"
    ):
        compile_regions(model)
    model = CausalLM().lm
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with without_kv_cache(model) as changed:
            compile_regions(model)
            assert changed == [model] and model.config.use_cache is False
    assert model.config.use_cache is True


class Classifier(LightningModule):
    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _graphed_net() -> torch.nn.Module:
    from lightning_accel.habana.sdk import hpu

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("hpu")
    return hpu.make_graphed_callables(net, (torch.randn(8, 16, device="hpu"),))


def test_make_graphed_callables_with_gradient_accumulation_is_refused(lazy_mode: None) -> None:
    graphed = _graphed_net()
    # What the refusal guards against: the SDK's graphed backward hands its static gradient to .grad, so a second
    # accumulated backward adds the new gradient to itself instead of to the first one.
    x, y = torch.randn(2, 8, 16, device="hpu"), torch.randint(0, 4, (2, 8), device="hpu")
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("hpu")
    eager.load_state_dict(graphed.state_dict())
    for i in range(2):
        F.cross_entropy(graphed(x[i]), y[i]).backward()
        F.cross_entropy(eager(x[i]), y[i]).backward()
    assert not torch.allclose(graphed[0].weight.grad, eager[0].weight.grad, atol=1e-3)

    with pytest.raises(ConfigurationError, match=r"^accumulate_grad_batches=2 is not accepted with modules graphed by"):
        check_graphed_callables(Classifier(graphed), accumulate_grad_batches=2)
    check_graphed_callables(Classifier(graphed), accumulate_grad_batches=1)
    data = DataLoader(TensorDataset(torch.randn(32, 16), torch.randint(0, 4, (32,))), batch_size=8)
    with pytest.raises(ConfigurationError, match=r"make_graphed_callables \('net'\)"):
        _trainer(HPUGraphs(), max_epochs=1, accumulate_grad_batches=2).fit(Classifier(_graphed_net()), data)
    # A module graphed by hand, without the HPUGraphs callback: the HPU accelerator refuses it as well.
    with pytest.raises(ConfigurationError, match=r"make_graphed_callables \('net'\)"):
        _trainer(max_epochs=1, accumulate_grad_batches=2).fit(Classifier(_graphed_net()), data)
