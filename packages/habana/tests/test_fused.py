"""Gaudi's fused kernels in Lightning (``lightning_accel.habana.fused``, ``HPUPrecisionPlugin(fused_clip_norm=True)``).

FusedAdamW from ``configure_optimizers`` trains; the Trainer's clipping by norm through the SDK's FusedClipNorm gives
the parameters of torch's clipping; a model's SDPA runs on FusedSDPA with its options; each is refused, naming the
argument, where the SDK lacks it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _habana_helpers import digits_classifier, digits_loaders
from lightning.pytorch import Trainer

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUPrecisionPlugin, sdk
from lightning_accel.habana.fused import fused_adamw, fused_clip_grad_norm_, fused_optimizer, fused_sdpa, use_fused_sdpa


def _trainer(**kwargs: Any) -> Trainer:
    return Trainer(
        accelerator="hpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


@pytest.fixture
def fused_sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The calls of the SDK's FusedSDPA, with their options."""
    cls = sdk.fused_kernels_module().FusedSDPA
    calls: list[dict[str, Any]] = []
    original = cls.apply

    def apply(*args: Any) -> Any:
        names = ("q", "k", "v", "attn_mask", "dropout_p", "is_causal", "scale", "softmax_mode", "recompute_mode")
        calls.append(dict(zip(names, args, strict=False)))
        return original(*args)

    monkeypatch.setattr(cls, "apply", apply)
    yield calls


# --- FusedAdamW from configure_optimizers ------------------------------------------------------------------------


def test_fused_adamw_from_configure_optimizers_trains_to_a_real_accuracy() -> None:
    torch.manual_seed(0)
    model = digits_classifier()
    optimizers: list[torch.optim.Optimizer] = []

    def configure_optimizers() -> torch.optim.Optimizer:
        optimizers.append(fused_adamw(model.parameters(), lr=1e-2, weight_decay=0.01))
        return optimizers[0]

    model.configure_optimizers = configure_optimizers  # type: ignore[method-assign]
    train, val = digits_loaders()
    trainer = _trainer(max_epochs=3)
    trainer.fit(model, train, val)
    assert type(trainer.optimizers[0]) is sdk.fused_optimizers_module().FusedAdamW
    assert trainer.optimizers[0].state, "the fused optimizer never stepped"
    assert float(trainer.callback_metrics["val_acc"]) > 0.9


def test_fused_optimizer_gives_the_sdks_classes_and_refuses_the_others() -> None:
    params = [torch.nn.Parameter(torch.zeros(2, device="hpu"))]
    module = sdk.fused_optimizers_module()
    assert type(fused_optimizer("SGD", params, lr=0.1, momentum=0.9)) is module.FusedSGD
    assert type(fused_optimizer("lamb", params)) is module.FusedLamb
    assert type(fused_optimizer("adagrad", params)) is module.FusedAdagrad
    with pytest.raises(ConfigurationError, match=r"fused_optimizer\(name='lars'\).*Accepted: 'adamw', 'sgd'"):
        fused_optimizer("lars", params)


# --- FusedClipNorm through the Trainer ---------------------------------------------------------------------------


def _fit_clipped(plugin: HPUPrecisionPlugin | None, algorithm: str = "norm") -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = digits_classifier(lr=5e-2)
    model.configure_optimizers = lambda: torch.optim.SGD(model.parameters(), lr=0.5)  # type: ignore[method-assign]
    train, _ = digits_loaders()
    trainer = _trainer(
        max_steps=20,
        gradient_clip_val=0.05,
        gradient_clip_algorithm=algorithm,
        plugins=[plugin] if plugin is not None else None,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(model, train)
    return [p.detach().cpu() for p in model.parameters()]


def test_trainer_clipping_by_norm_through_fused_clip_norm_matches_torchs(monkeypatch: pytest.MonkeyPatch) -> None:
    cls = sdk.fused_normalization_module().FusedClipNorm
    norms: list[float] = []
    original = cls.clip_norm

    def clip_norm(self: Any, parameters: Any) -> torch.Tensor:
        norm = original(self, parameters)
        norms.append(float(norm))
        return norm

    monkeypatch.setattr(cls, "clip_norm", clip_norm)
    fused = _fit_clipped(HPUPrecisionPlugin("32-true", fused_clip_norm=True))
    assert len(norms) == 20, "the Trainer did not clip through FusedClipNorm"
    assert all(n > 0.05 for n in norms), "the clipping never cut in: the comparison checks nothing"
    plain = _fit_clipped(None)
    unfused_plugin = _fit_clipped(HPUPrecisionPlugin("32-true"))
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    for a, b in zip(plain, unfused_plugin, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert len(norms) == 20, "the unfused runs went through FusedClipNorm"


def test_fused_clipping_by_value_is_refused_naming_the_arguments() -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"gradient_clip_algorithm='value'.*fused_clip_norm=True.*clips by norm only.*Accepted: "
        r"gradient_clip_algorithm='norm'",
    ):
        _fit_clipped(HPUPrecisionPlugin("32-true", fused_clip_norm=True), algorithm="value")
    with pytest.raises(ConfigurationError, match=r"fused_clip_norm='yes'.*Accepted: True"):
        HPUPrecisionPlugin("32-true", fused_clip_norm="yes")  # type: ignore[arg-type]


def test_fused_clip_grad_norm_matches_torchs_for_a_plain_loop() -> None:
    weights = [torch.nn.Parameter(torch.zeros(3, device="hpu")) for _ in range(2)]
    reference = [torch.nn.Parameter(torch.zeros(3, device="hpu")) for _ in range(2)]
    for ours, theirs, grad in zip(weights, reference, ([3.0, 4.0, 0.0], [0.0, 0.0, 12.0]), strict=True):
        ours.grad = torch.tensor(grad, device="hpu")
        theirs.grad = torch.tensor(grad, device="hpu")
    norm = fused_clip_grad_norm_(weights, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(reference, 1.0)
    assert float(norm) == pytest.approx(float(expected)) == pytest.approx(13.0)
    for ours, theirs in zip(weights, reference, strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad)


# --- FusedSDPA for a model's attention ---------------------------------------------------------------------------


class _Attention(torch.nn.Module):
    """A small self-attention block that calls torch's SDPA as transformers' "sdpa" attention does."""

    def __init__(self, heads: int = 2, dim: int = 16) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = True) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = (
            t.reshape(batch, length, self.heads, dim // self.heads).transpose(1, 2) for t in self.qkv(x).chunk(3, -1)
        )
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
        return self.out(attended.transpose(1, 2).reshape(batch, length, dim))


def _attention() -> tuple[_Attention, torch.Tensor]:
    torch.manual_seed(0)
    return _Attention().to("hpu"), torch.randn(2, 5, 16).to("hpu")


@pytest.mark.parametrize("recompute", [True, False])
def test_use_fused_sdpa_runs_the_models_attention_on_fused_sdpa(
    recompute: bool, fused_sdpa_calls: list[dict[str, Any]]
) -> None:
    model, x = _attention()
    reference = copy.deepcopy(model)
    with use_fused_sdpa(model, recompute=recompute):
        out = model(x)
        assert F.scaled_dot_product_attention.__name__ == "scaled_dot_product_attention"
        assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention, "swapped outside forward"
    assert len(fused_sdpa_calls) == 1
    call = fused_sdpa_calls[0]
    assert call["is_causal"] is True and call["recompute_mode"] is recompute and call["softmax_mode"] == "None"
    expected = reference(x)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    out.sum().backward()
    expected.sum().backward()
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad, atol=1e-5, rtol=1e-4)
    # Removed: torch's SDPA again.
    model(x)
    assert len(fused_sdpa_calls) == 1


def test_use_fused_sdpa_causal_drops_the_mask(fused_sdpa_calls: list[dict[str, Any]]) -> None:
    model, x = _attention()
    reference = copy.deepcopy(model)
    causal_mask = torch.ones(5, 5, dtype=torch.bool, device="hpu").tril()
    handle = use_fused_sdpa(model, causal=True)
    out = model(x, mask=causal_mask, is_causal=False)
    handle.remove()
    assert fused_sdpa_calls[0]["attn_mask"] is None and fused_sdpa_calls[0]["is_causal"] is True
    torch.testing.assert_close(out, reference(x, mask=causal_mask, is_causal=False), atol=1e-5, rtol=1e-4)


def test_use_fused_sdpa_in_a_trainer_run(fused_sdpa_calls: list[dict[str, Any]]) -> None:
    from lightning.pytorch import LightningModule

    class Module(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = _Attention()
            use_fused_sdpa(self.model, recompute=True, causal=True)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.model(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return fused_adamw(self.parameters(), lr=1e-2)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 5, 16)), batch_size=4)
    _trainer(max_steps=4).fit(Module(), data)
    assert len(fused_sdpa_calls) == 4


def test_fused_sdpa_function_matches_torch() -> None:
    q, k, v = (torch.randn(1, 2, 4, 8).to("hpu") for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5)
    torch.testing.assert_close(fused_sdpa(q, k, v, is_causal=True, scale=0.5, recompute=False), expected)


def test_fused_sdpa_compiles_into_one_graph_and_matches_torch() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8).to("hpu").requires_grad_() for _ in range(3))
    # The first call of the process may be inside the compiled code: the SDK is looked up while Dynamo traces.
    compiled = torch.compile(lambda q, k, v: fused_sdpa(q, k, v, is_causal=True), backend="hpu_backend", fullgraph=True)
    out = compiled(q, k, v)
    out.pow(2).sum().backward()
    ours = [t.grad.clone() for t in (q, k, v)]  # type: ignore[union-attr]
    for t in (q, k, v):
        t.grad = None
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected.pow(2).sum().backward()
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    for grad, t in zip(ours, (q, k, v), strict=True):
        torch.testing.assert_close(grad, t.grad, atol=1e-5, rtol=1e-4)
    with pytest.raises(ConfigurationError, match=r"softmax_mode='flash' is not a mode"):
        torch.compile(lambda q: fused_sdpa(q, k, v, softmax_mode="flash"), backend="hpu_backend")(q)


def test_use_fused_sdpa_reaches_a_compiled_model() -> None:
    torch._dynamo.reset()
    model, x = _attention()
    reference = copy.deepcopy(model)
    # causal=True makes every call causal: the model's own non-causal call shows which SDPA the compiled code ran.
    with use_fused_sdpa(model, causal=True):
        compiled = torch.compile(model, backend="hpu_backend", fullgraph=True)
        out = compiled(x, is_causal=False)
        again = compiled(x, is_causal=False)
    torch.testing.assert_close(out, reference(x, is_causal=True), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(again, out)
    assert not torch.allclose(out, reference(x, is_causal=False), atol=1e-3)


def test_fused_sdpa_options_the_sdk_lacks_are_refused_by_name() -> None:
    model, x = _attention()
    with pytest.raises(ConfigurationError, match=r"softmax_mode='flash' is not a mode.*Accepted: 'None'.*'fast'"):
        use_fused_sdpa(model, softmax_mode="flash")
    with pytest.raises(ConfigurationError, match=r"recompute='yes' is not a bool"):
        use_fused_sdpa(model, recompute="yes")  # type: ignore[arg-type]
    with use_fused_sdpa(model, softmax_mode="fast"):
        with pytest.raises(ConfigurationError, match=r"softmax_mode='fast' on a non-causal.*Accepted: causal=True"):
            model(x, is_causal=False)
        model(x, is_causal=True).sum().backward()  # fast softmax with causal recompute training: the SDK's case


def test_use_fused_sdpa_on_a_transformers_llama_with_grouped_query_attention(
    fused_sdpa_calls: list[dict[str, Any]],
) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to("hpu")
    reference = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 8)).to("hpu")
    with use_fused_sdpa(model, recompute=True):
        loss = model(input_ids=ids, labels=ids).loss
    assert len(fused_sdpa_calls) == 2, "transformers' sdpa attention did not reach FusedSDPA"
    assert fused_sdpa_calls[0]["k"].shape[1] == 2, "the key heads were repeated: GQA did not reach the kernel"
    expected = reference(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-4)
    loss.backward()
    expected.backward()
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad, atol=1e-5, rtol=1e-4)
