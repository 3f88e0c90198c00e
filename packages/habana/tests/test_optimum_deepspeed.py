"""The importer fills a Hugging Face DeepSpeed config's "auto" values as transformers' HfTrainerDeepSpeedConfig does."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana.optimum import import_optimum_habana

# The shape of the ZeRO-3 config optimum-habana's examples ship (examples/language-modeling/...ds_zero3.json style).
ZERO3: dict[str, Any] = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 64,
    "bf16": {"enabled": "auto"},
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
    },
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {
            "warmup_min_lr": "auto",
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto",
            "total_num_steps": "auto",
        },
    },
    "zero_optimization": {
        "stage": 3,
        "overlap_comm": False,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
    },
}
ARGUMENTS: dict[str, Any] = {
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 2,
    "max_grad_norm": 0.5,
    "learning_rate": 3e-4,
    "adam_beta1": 0.8,
    "adam_beta2": 0.95,
    "adam_epsilon": 1e-8,
    "weight_decay": 0.1,
    "bf16": True,
    "warmup_ratio": 0.1,
    "use_lazy_mode": False,
}


def _config(run: Any) -> dict[str, Any]:
    kind, arguments = run.strategy
    assert kind == "deepspeed"
    return arguments["config"]


def test_auto_values_are_filled_from_the_training_arguments(tmp_path: Path) -> None:
    path = tmp_path / "ds_zero3.json"
    path.write_text(json.dumps(ZERO3))
    run = import_optimum_habana(None, {**ARGUMENTS, "deepspeed": str(path), "max_steps": 50})
    config = _config(run)
    assert config["train_micro_batch_size_per_gpu"] == 4
    assert config["gradient_clipping"] == 0.5
    assert config["bf16"] == {"enabled": True}
    assert config["optimizer"]["params"] == {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-8, "weight_decay": 0.1}
    # max_steps known: the step counts too (warm-up: ceil(0.1 * 50)).
    assert config["scheduler"]["params"] == {
        "warmup_min_lr": 0,
        "warmup_max_lr": 3e-4,
        "warmup_num_steps": 5,
        "total_num_steps": 50,
    }
    # Lightning sets the accumulation from the Trainer (refusing the key in the config); DeepSpeed derives the global
    # batch (micro batch x accumulation x world size).
    assert "gradient_accumulation_steps" not in config and "train_batch_size" not in config
    assert run.trainer["accumulate_grad_batches"] == 2
    assert config["steps_per_print"] == 64  # what was not "auto" stays
    assert json.loads(path.read_text()) == ZERO3  # the user's file is not changed


def _tiny_gpt2_module() -> Any:
    from lightning.pytorch import LightningModule
    from transformers import GPT2Config, GPT2LMHeadModel

    class CausalLM(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = GPT2LMHeadModel(GPT2Config(n_embd=48, n_layer=1, n_head=2, vocab_size=64, n_positions=16))

    return CausalLM()


def test_the_model_width_and_step_count_fill_the_rest_when_the_fit_starts() -> None:
    run = import_optimum_habana(None, {**ARGUMENTS, "deepspeed": ZERO3})
    config = _config(run)
    assert config["zero_optimization"]["reduce_bucket_size"] == "auto"  # no model yet
    assert config["scheduler"]["params"]["total_num_steps"] == "auto"  # the epochs' steps depend on the data
    (fill,) = [c for c in run.callbacks() if type(c).__name__ == "DeepSpeedAutoFill"]
    # The Trainer's part that the callback reads: the strategy's config and the step count (DeepSpeed itself is not
    # needed to fill the config).
    trainer = SimpleNamespace(strategy=SimpleNamespace(config=config), estimated_stepping_batches=40)
    fill.setup(trainer, _tiny_gpt2_module(), "fit")
    assert config["zero_optimization"] == {
        "stage": 3,
        "overlap_comm": False,
        "reduce_bucket_size": 48 * 48,
        "stage3_prefetch_bucket_size": int(0.9 * 48 * 48),
        "stage3_param_persistence_threshold": 480,
    }
    assert (config["scheduler"]["params"]["total_num_steps"], config["scheduler"]["params"]["warmup_num_steps"]) == (
        40,
        4,
    )


def test_a_model_without_a_width_is_refused_naming_the_keys() -> None:
    from lightning.pytorch import LightningModule

    run = import_optimum_habana(None, {**ARGUMENTS, "deepspeed": ZERO3, "max_steps": 10})
    (fill,) = [c for c in run.callbacks() if type(c).__name__ == "DeepSpeedAutoFill"]
    trainer = SimpleNamespace(strategy=SimpleNamespace(config=_config(run)), estimated_stepping_batches=10)
    with pytest.raises(ConfigurationError) as raised:
        fill.setup(trainer, LightningModule(), "fit")
    assert str(raised.value).startswith(
        "DeepSpeed config: zero_optimization.reduce_bucket_size, zero_optimization.stage3_prefetch_bucket_size, "
        'zero_optimization.stage3_param_persistence_threshold are "auto", which the model\'s width decides'
    )


def test_values_that_disagree_with_the_arguments_are_refused() -> None:
    config = {**ZERO3, "gradient_accumulation_steps": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana(None, {**ARGUMENTS, "deepspeed": config})
    assert str(raised.value) == (
        "training_args: the DeepSpeed config and the training arguments disagree (the Hugging Face Trainer refuses "
        "this too):\n"
        "  gradient_accumulation_steps=4 but gradient_accumulation_steps=2\n"
        "  optimizer.params.lr=0.001 but learning_rate=0.0003\n"
        'Set these keys to "auto", or make them equal to the arguments.'
    )
    # Equal values pass; Lightning still gets the accumulation from the Trainer only.
    same = {"gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2}}
    run = import_optimum_habana(None, {**ARGUMENTS, "deepspeed": same})
    assert _config(run) == {"zero_optimization": {"stage": 2}}
    assert not [c for c in run.callbacks() if type(c).__name__ == "DeepSpeedAutoFill"]


def _tiny_llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, vocab_size=64
    )
    return LlamaForCausalLM(config)


def test_zero3_leaf_promotion_makes_the_decoder_layers_deepspeed_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    # DeepSpeed is not installed here: its set_z3_leaf_modules, as DeepSpeed writes it (a flag on each instance).
    def set_z3_leaf_modules(model: Any, classes: list[type]) -> list[Any]:
        leaves = [m for m in model.modules() if isinstance(m, tuple(classes))]
        for leaf in leaves:
            leaf._z3_leaf = True
        return leaves

    utils = types.ModuleType("deepspeed.utils")
    utils.set_z3_leaf_modules = set_z3_leaf_modules  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "deepspeed", types.ModuleType("deepspeed"))
    monkeypatch.setitem(sys.modules, "deepspeed.utils", utils)

    run = import_optimum_habana(None, {**ARGUMENTS, "deepspeed": ZERO3, "use_zero3_leaf_promotion": True})
    model = _tiny_llama()
    run.prepare_model(model)
    leaves = [type(m).__name__ for m in model.modules() if getattr(m, "_z3_leaf", False)]
    assert leaves == ["LlamaDecoderLayer", "LlamaDecoderLayer"]

    from transformers import GPT2Config, GPT2LMHeadModel

    with pytest.raises(ConfigurationError) as raised:
        run.prepare_model(GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=32)))
    assert str(raised.value).startswith(
        "use_zero3_leaf_promotion=True: the model's type (GPT2LMHeadModel, config.model_type='gpt2') has no "
        "registered leaf block (optimum-habana skips it then, without a word). Accepted: a transformers model of "
        "type llama, mixtral, qwen3_moe"
    )


def test_zero3_leaf_promotion_refuses_runs_without_zero3() -> None:
    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana(None, {"use_zero3_leaf_promotion": True})
    assert "use_zero3_leaf_promotion=True without a DeepSpeed ZeRO stage 3 config" in str(raised.value)
    assert "found no deepspeed" in str(raised.value)
    with pytest.raises(ConfigurationError, match="found stage 2"):
        import_optimum_habana(
            None, {"use_zero3_leaf_promotion": True, "deepspeed": {"zero_optimization": {"stage": 2}}}
        )
