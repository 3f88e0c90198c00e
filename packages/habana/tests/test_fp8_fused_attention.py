"""optimum-habana's ``flash_attention_fp8``: each attention layer of a transformers causal LM on its own FusedAttention.

All on the emulated SDK: the fp8 numbers are the emulator's quantize-dequantize attention, not Gaudi's kernel.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUPrecisionPlugin, sdk
from lightning_accel.habana.fp8_attention import ATTENTION_NAME, use_fp8_fused_attention
from lightning_accel.habana.optimum import import_optimum_habana

transformers = pytest.importorskip("transformers")

VOCAB = 64
FP8_ARGUMENTS = {
    "fp8": True,
    "attn_implementation": "gaudi_fused_sdpa",
    "flash_attention_fp8": True,
    "flash_attention_causal_mask": True,
    "use_lazy_mode": False,
    "learning_rate": 3e-3,
    "max_steps": 4,
    "report_to": "none",
    "save_strategy": "no",
}


def _llama(**model_kwargs: Any) -> Any:
    torch.manual_seed(0)
    sizes = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
    config = transformers.LlamaConfig(**{**sizes, "num_key_value_heads": 2, "vocab_size": VOCAB, **model_kwargs})
    return transformers.LlamaForCausalLM(config)


class _CausalLM(LightningModule):
    def __init__(self, model: Any, run: Any) -> None:
        super().__init__()
        self.model = model
        self.run = run
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (ids,) = batch
        loss: torch.Tensor = self.model(input_ids=ids, labels=ids).loss
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> Any:
        return self.run.configure_optimizers(self)


def _loader() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(1)
    # A repeating pattern, so that a few steps show the loss falling.
    start = torch.randint(0, VOCAB, (8, 1), generator=generator)
    ids = (start + torch.arange(24)) % VOCAB
    return DataLoader(TensorDataset(ids), batch_size=4)


def _fit(tmp_path: Path, arguments: dict[str, Any]) -> tuple[Any, Any, Trainer, list[Any]]:
    run = import_optimum_habana(None, {**arguments, "output_dir": str(tmp_path)})
    model = _llama(**run.model_kwargs)
    handles = run.prepare_model(model)
    module = _CausalLM(model, run)
    trainer = Trainer(**{**run.trainer_kwargs(devices=1), "enable_progress_bar": False, "logger": False})
    trainer.fit(module, _loader())
    return run, module, trainer, handles


def test_flash_attention_fp8_trains_every_attention_layer_in_fp8(eager_mode: None, tmp_path: Path) -> None:
    te = sdk.transformer_engine_module()
    _, module, trainer, handles = _fit(tmp_path, FP8_ARGUMENTS)

    assert trainer.precision_plugin.precision == "fp8"
    (handle,) = [h for h in handles if hasattr(h, "fp8_calls")]
    layers = [m for m in module.model.modules() if isinstance(m, te.FusedAttention)]
    assert len(layers) == 2 and module.model.config._attn_implementation == ATTENTION_NAME
    # Every layer ran in fp8 at every step (2 layers x 4 steps), none in bf16.
    assert (handle.fp8_calls, handle.other_calls) == (8, 0)
    for layer in layers:
        # The amaxes of q, k, v, S and of dO, dS were recorded, and delayed scaling moved the scales off 1.
        assert bool((layer.fp8_meta["scaling_fwd"].amax_history[:, :4] > 0).all())
        assert bool((layer.fp8_meta["scaling_bwd"].amax_history[:, :2] > 0).all())
        assert bool((layer.fp8_meta["scaling_fwd"].scale[:4] != 1).all())
    assert module.losses[-1] < module.losses[0]


def test_the_layers_fp8_state_is_in_the_checkpoint_and_resumes(eager_mode: None, tmp_path: Path) -> None:
    _, module, trainer, _ = _fit(tmp_path, FP8_ARGUMENTS)
    path = tmp_path / "fp8.ckpt"
    trainer.save_checkpoint(path)
    state = torch.load(path, weights_only=False)["state_dict"]
    keys = sorted(k for k in state if "fp8_fused_attention" in k)
    assert keys == [f"model.model.layers.{i}.self_attn.fp8_fused_attention._extra_state" for i in range(2)]

    run = import_optimum_habana(None, {**FP8_ARGUMENTS, "output_dir": str(tmp_path)})
    fresh = _llama(**run.model_kwargs)
    run.prepare_model(fresh)
    resumed = _CausalLM(fresh, run)
    resumed.load_state_dict(state)  # strict: the layers were there before the checkpoint loaded
    for before, after in zip(module.model.model.layers, fresh.model.layers, strict=True):
        old, new = before.self_attn.fp8_fused_attention.fp8_meta, after.self_attn.fp8_fused_attention.fp8_meta
        for key in ("scaling_fwd", "scaling_bwd"):
            torch.testing.assert_close(new[key].scale, old[key].scale.to(new[key].scale.device))
            torch.testing.assert_close(new[key].amax_history, old[key].amax_history.to(new[key].amax_history.device))


def test_fp8_attention_is_sdpa_up_to_fp8_rounding() -> None:
    te = sdk.transformer_engine_module()
    model = _llama(attn_implementation="sdpa").to("hpu")
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(2)).to("hpu")
    with torch.no_grad():
        reference = model(ids).logits
    with use_fp8_fused_attention(model) as handle:
        with torch.no_grad(), te.fp8_autocast(enabled=True, fp8_recipe=te.recipe.DelayedScaling()):
            fp8 = model(ids).logits
        assert (handle.fp8_calls, handle.other_calls) == (2, 0)
    error = float((fp8 - reference).norm() / reference.norm())
    assert 1e-4 < error < 5e-2  # fp8 rounding of q, k and v: visible, and small
    # remove() gave the model back its attention and its state_dict.
    assert model.config._attn_implementation == "sdpa"
    assert not any("fp8_fused_attention" in k for k in model.state_dict())


def test_a_padding_mask_is_dropped_with_one_warning() -> None:
    te = sdk.transformer_engine_module()
    model = _llama(attn_implementation="sdpa").to("hpu")
    ids = torch.randint(0, VOCAB, (2, 8), device="hpu")
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    handle = use_fp8_fused_attention(model)
    with torch.no_grad(), te.fp8_autocast(enabled=True, fp8_recipe=te.recipe.DelayedScaling()):
        model(ids, attention_mask=torch.ones_like(ids))  # no padding: no mask reaches the layers
        assert handle.masks_dropped == 0
        with pytest.warns(UserWarning, match="fp8 fused attention dropped an attention mask") as caught:
            model(ids, attention_mask=mask)
            model(ids, attention_mask=mask)
    assert len([w for w in caught if "dropped an attention mask" in str(w.message)]) == 1
    assert handle.masks_dropped == 4


def test_training_outside_fp8_autocast_is_refused() -> None:
    model = _llama(attn_implementation="sdpa").to("hpu")
    use_fp8_fused_attention(model)
    ids = torch.randint(0, VOCAB, (2, 8), device="hpu")
    with pytest.raises(ConfigurationError, match="training step outside fp8_autocast, where the SDK runs it in bf16"):
        model(ids, labels=ids)


def test_fp8_attention_leaves_the_linear_layers_to_convert() -> None:
    te = sdk.transformer_engine_module()
    model = _llama(attn_implementation="sdpa")
    use_fp8_fused_attention(model)
    HPUPrecisionPlugin("fp8").convert_modules(model, replace_layers=True)
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert any(isinstance(m, te.Linear) for m in model.modules())


def test_models_and_arguments_it_cannot_serve_are_refused() -> None:
    with pytest.raises(
        ConfigurationError, match=r"softmax_mode='fp32'\): accepted: 'None' \(exact softmax\) or 'fast'"
    ):
        use_fp8_fused_attention(_llama(), softmax_mode="fp32")
    with pytest.raises(ConfigurationError, match="model=Linear\\): accepted: a transformers PreTrainedModel"):
        use_fp8_fused_attention(torch.nn.Linear(2, 2))
    bert = transformers.BertModel(
        transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    )
    with pytest.raises(ConfigurationError, match="BertSelfAttention attend without a causal mask"):
        use_fp8_fused_attention(bert)
    model = _llama()
    use_fp8_fused_attention(model)
    with pytest.raises(ConfigurationError, match=r"already have a fp8_fused_attention\. Apply it once per model"):
        use_fp8_fused_attention(model)


def test_a_prompt_continued_from_a_cache_is_refused() -> None:
    te = sdk.transformer_engine_module()
    model = _llama(attn_implementation="sdpa").to("hpu").eval()
    use_fp8_fused_attention(model)
    ids = torch.randint(0, VOCAB, (1, 8), device="hpu")
    with torch.no_grad(), te.fp8_autocast(enabled=True, fp8_recipe=te.recipe.DelayedScaling()):
        # transformers 5 calls the cache `cache`, earlier releases `past_key_values`.
        name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        past = getattr(model(ids, use_cache=True), name)
        model(ids[:, -1:], use_cache=True, **{name: past})  # one new token attends to every cached key
        with pytest.raises(ConfigurationError, match="fp8 fused attention of 4 queries over 13 cached keys"):
            model(ids[:, :4], use_cache=True, **{name: past})


def test_the_importer_refuses_fp8_attention_that_would_not_run() -> None:
    base = {k: v for k, v in FP8_ARGUMENTS.items() if k.startswith(("fp8", "attn", "flash"))}
    for change, shown in (
        ({"fp8": False}, "fp8=False (needs True)"),
        ({"attn_implementation": "sdpa"}, "attn_implementation='sdpa' (needs 'gaudi_fused_sdpa')"),
        ({"flash_attention_causal_mask": False}, "flash_attention_causal_mask=False (needs True)"),
        ({"flash_attention_recompute": True}, "flash_attention_recompute=True (needs False)"),
    ):
        with pytest.raises(ConfigurationError) as raised:
            import_optimum_habana(None, {**base, **change})
        assert f"flash_attention_fp8=True with {shown}: fp8 attention runs only when" in str(raised.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = import_optimum_habana(None, {**base, "flash_attention_fast_softmax": True})
    assert run.model_setup["fp8_fused_attention"] == {"softmax_mode": "fast"}


def test_compiled_fp8_attention_computes_what_eager_does(eager_mode: None) -> None:
    # The SDK's fp8 casts return dense tensors: a compiled graph that assumed the strides of a transposed key failed.
    te = sdk.transformer_engine_module()
    model = _llama(attn_implementation="sdpa", num_hidden_layers=1).to("hpu")  # one layer: less to compile
    HPUPrecisionPlugin("fp8").convert_modules(model, replace_layers=True)
    handle = use_fp8_fused_attention(model)
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(4)).to("hpu")
    recipe = te.recipe.DelayedScaling()
    losses = []
    for run in (model, torch.compile(model, backend="hpu_backend")):
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            losses.append(run(ids, labels=ids).loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=0)
    assert handle.fp8_calls == 2
