"""``torch.compile`` over tensors of the emulated ``"hpu"`` device (``lightning_accel.emulated_hpu``, ``hpu_backend``).

The device cannot be uninstalled from a process, so, as in ``test_hpu_device.py``, these tests run in one child
pytest process of their own and each test here reports the outcome of the same test in that child.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from _child_pytest import isolated_in_child

# Reads the emulator's internals (or stands in for the SDK): not a test of real hardware.
pytestmark = pytest.mark.emulator_only


def _fresh_dynamo() -> None:
    import lightning_accel.habana_emulator  # noqa: F401  (the SDK's load: the device and hpu_backend)

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


CHILD_VAR = "LIGHTNING_ACCEL_TEST_HPU_DEVICE_COMPILE_CHILD"
isolated = isolated_in_child(__file__, CHILD_VAR, timeout=900, before_each=_fresh_dynamo, LIGHTNING_ACCEL_EMULATE="hpu")


class _SpyBackend:
    """``hpu_backend``, recording the graphs it is given."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
        from lightning_accel.habana_emulator.dynamo.compile_backend.backends import hpu_backend

        self.graphs.append(graph_module)
        return hpu_backend(graph_module, example_inputs, **kwargs)

    def ops(self) -> list[Any]:
        return [n.target for g in self.graphs for n in g.graph.nodes if n.op in ("call_function", "call_method")]


def _assert_no_eager_fallback() -> None:
    counters = torch._dynamo.utils.counters
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] >= 1


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)
    ).to("hpu")


def _default_backend_failure() -> str:
    """What torch's default backend (Inductor) raises for a function on HPU tensors, as type and message."""

    @torch.compile  # a GPU script's decorator
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2

    with pytest.raises(Exception) as failed:  # torch's error, whatever its type: compared below
        scaled(torch.randn(4, device="hpu"))
    return f"{type(failed.value).__module__}.{type(failed.value).__name__}: {failed.value}"


# First in this module: the child runs it before any other test here has compiled with hpu_backend.
@isolated
def test_torchs_default_backend_fails_on_hpu_before_and_after_hpu_backend_compiles() -> None:
    # Gaudi's Inductor has no "hpu" device; the emulator registers the CPU's code generator for hpu_backend's own
    # compilations only, so the default backend fails the same way whether or not hpu_backend has compiled.
    before = _default_backend_failure()
    assert "KeyError: 'hpu'" in before, before

    x = torch.randn(5, 8, device="hpu")
    model, eager_model = _mlp(), _mlp()
    compiled = torch.compile(model, backend="hpu_backend")

    def step(batch: torch.Tensor) -> None:
        for m in (model, eager_model):
            m.zero_grad()
        out = compiled(batch)
        expected = eager_model(batch)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-6)
        out.square().mean().backward()  # the backward graph compiles here, at its first call
        expected.square().mean().backward()
        for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
            assert p.grad is not None and q.grad is not None
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)

    # Without Inductor's caches: a graph an earlier run compiled would be loaded, not compiled, here.
    with torch.compiler.config.patch(force_disable_caches=True):
        for rows in (5, 7, 7, 9, 5):  # a second shape recompiles (dynamic shapes); the compiled code is reused after
            step(x.new_empty(rows, 8).normal_())
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2  # compiled and recompiled, not run eagerly

    after = _default_backend_failure()
    assert after == before
    for _ in range(3):  # hpu_backend's compiled forward and backward keep running
        step(x)


@isolated
def test_backend_compiles_a_graph_whose_forward_equals_eager() -> None:
    from lightning_accel.habana_emulator import hpu

    model = torch.nn.Linear(4, 2).to("hpu")
    x = torch.randn(3, 4, device="hpu")
    spy = _SpyBackend()
    compiled = torch.compile(model, backend=spy)
    before = hpu.memory_stats()["NumAllocs"]
    y = compiled(x)
    assert len(spy.graphs) == 1
    assert spy.ops(), spy.graphs[0].graph
    _assert_no_eager_fallback()
    assert type(y) is torch.Tensor
    assert y.device == torch.device("hpu", 0)
    # The output of the compiled graph is a new device allocation, as the output of an eager operation is.
    assert hpu.memory_stats()["NumAllocs"] > before
    torch.testing.assert_close(y, model(x))
    y.sum().backward()
    assert model.weight.grad is not None
    assert model.weight.grad.device == torch.device("hpu", 0)
    assert type(model.weight.grad) is torch.Tensor


@isolated
def test_training_steps_of_a_compiled_mlp_match_eager() -> None:
    x = torch.randn(64, 8).to("hpu")
    y = torch.randint(0, 4, (64,)).to("hpu")

    def train(model: torch.nn.Module, forward: Callable[..., torch.Tensor]) -> list[float]:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
        losses = []
        for _ in range(6):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(forward(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    eager_model = _mlp()
    eager = train(eager_model, eager_model)
    model = _mlp()
    spy = _SpyBackend()
    compiled = train(model, torch.compile(model, backend=spy))
    assert len(spy.graphs) == 1
    assert torch.ops.aten.linear.default in spy.ops() or torch._C._nn.linear in spy.ops(), spy.graphs[0].graph
    _assert_no_eager_fallback()
    assert compiled[-1] < compiled[0]
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
        assert p.grad is not None
        assert p.grad.device == torch.device("hpu", 0)
        assert p.device == torch.device("hpu", 0)
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


@isolated
def test_compile_by_backend_name_with_loss_in_the_graph() -> None:
    x = torch.randn(16, 8).to("hpu")
    y = torch.randint(0, 4, (16,)).to("hpu")
    eager_model, model = _mlp(), _mlp()

    @torch.compile(backend="hpu_backend")
    def loss_fn(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(inputs), targets)

    loss = loss_fn(x, y)
    expected = torch.nn.functional.cross_entropy(eager_model(x), y)
    _assert_no_eager_fallback()
    torch.testing.assert_close(loss, expected)
    loss.backward()
    expected.backward()
    for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None
        assert p.grad.device == torch.device("hpu", 0)
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)


@isolated
def test_views_input_mutations_and_buffers() -> None:
    def mutate(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a.mul_(2)
        a[0].add_(1)
        return a.t().reshape(-1)[:5], *a.split(2)

    x = torch.randn(4, 8, device="hpu")
    expected_input = x.clone()
    expected = mutate(expected_input)
    spy = _SpyBackend()
    out = torch.compile(mutate, backend=spy)(x)
    _assert_no_eager_fallback()
    assert len(spy.graphs) == 1
    torch.testing.assert_close(x, expected_input)
    for got, want in zip(out, expected, strict=True):
        assert got.device == torch.device("hpu", 0)
        torch.testing.assert_close(got, want)

    torch.manual_seed(0)
    norm = torch.nn.BatchNorm1d(8).to("hpu")
    torch.compile(norm, backend="hpu_backend")(x)
    assert norm.running_mean.device == torch.device("hpu", 0)
    torch.testing.assert_close(norm.running_mean, 0.1 * x.mean(0))
    assert norm.num_batches_tracked.item() == 1


@isolated
def test_code_around_a_graph_break_runs_on_the_device() -> None:
    # The device layer's own frames run eagerly under dynamo here; dynamo must leave them alone.
    def fn(a: torch.Tensor) -> torch.Tensor:
        b = a * 2
        torch._dynamo.graph_break()
        return torch.nn.functional.relu(b + 1)

    x = torch.randn(5, device="hpu")
    spy = _SpyBackend()
    torch.testing.assert_close(torch.compile(fn, backend=spy)(x), fn(x))
    assert len(spy.graphs) == 2


@isolated
def test_tensors_created_on_hpu_inside_the_compiled_code_compile() -> None:
    # Inductor compiles for "hpu" itself (habana_emulator._inductor), so factories and SDPA inside compiled code work.
    x = torch.randn(4, 4, device="hpu")
    arange = torch.compile(lambda a: (a * 2).sin() + torch.arange(a.shape[0], device=a.device), backend="hpu_backend")
    out = arange(x)
    assert out.device == torch.device("hpu", 0)
    torch.testing.assert_close(out.cpu(), (x.cpu() * 2).sin() + torch.arange(4))
    q = torch.randn(1, 2, 4, 8, device="hpu")
    attention = torch.compile(
        lambda a: torch.nn.functional.scaled_dot_product_attention(a, a, a), backend="hpu_backend"
    )
    torch.testing.assert_close(
        attention(q).cpu(), torch.nn.functional.scaled_dot_product_attention(q.cpu(), q.cpu(), q.cpu())
    )
    _assert_no_eager_fallback()


# --- real models: transformers' GPT-2 and Llama, configs in code --------------------------------------------------


def _causal_lm(kind: str) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":
        # No dropout: compiled and eager code draw different random numbers, and the losses are compared.
        gpt2 = GPT2Config(
            vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, attn_implementation="sdpa",
        )  # fmt: skip
        return GPT2LMHeadModel(gpt2)
    llama = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, attn_implementation="sdpa",
    )  # fmt: skip
    return LlamaForCausalLM(llama)


def _train_causal_lm(kind: str, compiled: bool) -> list[float]:
    model = _causal_lm(kind).to("hpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    forward = torch.compile(model, backend="hpu_backend") if compiled else model
    tokens = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(1)).to("hpu")
    losses = []
    for _ in range(20):
        loss = forward(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def _assert_compiled_training_matches_eager(kind: str) -> None:
    eager = _train_causal_lm(kind, compiled=False)
    compiled = _train_causal_lm(kind, compiled=True)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # compiled, not run eagerly
    # bfloat16's tolerance (torch.testing's), on float32 training: Inductor's fused kernels round differently.
    torch.testing.assert_close(compiled, eager, rtol=1.6e-2, atol=1e-5)
    assert eager[-1] < 0.5 * eager[0]  # it learns the batch


@isolated
def test_transformers_gpt2_trains_20_compiled_steps_with_eager_losses() -> None:
    _assert_compiled_training_matches_eager("gpt2")


@isolated
def test_transformers_llama_trains_20_compiled_steps_with_eager_losses() -> None:
    _assert_compiled_training_matches_eager("llama")
