"""The optimum-habana importer: every field mapped or refused, the docs' table, and a run on the emulated HPU."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana.optimum import FIELDS, OptimumImport, import_optimum_habana
from lightning_accel.habana.optimum._table import docs_block

DATA = Path(__file__).parent / "data" / "optimum"
REPO = Path(__file__).resolve().parents[3]
PUBLISHED = sorted(DATA.glob("habana-*.gaudi_config.json"))
PUBLISHED = [p for p in PUBLISHED if "pre-1.9" not in p.name]

Check = Callable[[OptimumImport], bool]

# field -> (value, other fields it needs, what the result then shows). Each mapped field must change the result.
MAPPED: dict[str, tuple[Any, dict[str, Any], Check]] = {
    # GaudiConfig
    "use_torch_autocast": (True, {}, lambda r: r.precision == "bf16-mixed"),
    "autocast_bf16_ops": (["linear"], {"use_torch_autocast": True}, lambda r: r.autocast_bf16_ops == ("linear",)),
    "autocast_fp32_ops": (["softmax"], {"use_torch_autocast": True}, lambda r: r.autocast_fp32_ops == ("softmax",)),
    "use_fused_adam": (True, {}, lambda r: r.optimizer["fused"]),
    "use_fused_clip_norm": (True, {}, lambda r: r.fused_clip_norm),
    # GaudiTrainingArguments
    "output_dir": ("out", {}, lambda r: r.trainer.get("default_root_dir") == "out"),
    "eval_strategy": (
        "epoch",
        {},
        lambda r: r.trainer.get("check_val_every_n_epoch") == 1 and r.validate_in_fit,
    ),
    "per_device_train_batch_size": (3, {}, lambda r: r.dataloaders["train"]["batch_size"] == 3),
    "per_device_eval_batch_size": (3, {}, lambda r: r.dataloaders["eval"]["batch_size"] == 3),
    "per_gpu_train_batch_size": (5, {}, lambda r: r.dataloaders["train"]["batch_size"] == 5),
    "per_gpu_eval_batch_size": (5, {}, lambda r: r.dataloaders["eval"]["batch_size"] == 5),
    "gradient_accumulation_steps": (4, {}, lambda r: r.trainer["accumulate_grad_batches"] == 4),
    "learning_rate": (1e-3, {}, lambda r: r.optimizer["lr"] == 1e-3),
    "weight_decay": (0.1, {}, lambda r: r.optimizer["weight_decay"] == 0.1),
    "adam_beta1": (0.8, {}, lambda r: r.optimizer["betas"][0] == 0.8),
    "adam_beta2": (0.99, {}, lambda r: r.optimizer["betas"][1] == 0.99),
    "adam_epsilon": (1e-8, {}, lambda r: r.optimizer["eps"] == 1e-8),
    "max_grad_norm": (0.0, {}, lambda r: r.trainer["gradient_clip_val"] is None),
    "num_train_epochs": (5, {}, lambda r: r.trainer["max_epochs"] == 5),
    "max_steps": (7, {}, lambda r: r.trainer.get("max_steps") == 7 and r.trainer["max_epochs"] == -1),
    "lr_scheduler_type": ("cosine", {}, lambda r: r.scheduler["name"] == "cosine"),
    "lr_scheduler_kwargs": (
        {"num_cycles": 2},
        {"lr_scheduler_type": "cosine_with_restarts"},
        lambda r: r.scheduler["kwargs"] == {"num_cycles": 2},
    ),
    "warmup_ratio": (0.1, {}, lambda r: r.scheduler["warmup_ratio"] == 0.1),
    "load_best_model_at_end": (True, {"eval_strategy": "epoch", "save_strategy": "epoch"}, lambda r: r.load_best),
    "warmup_steps": (10, {}, lambda r: r.scheduler["warmup_steps"] == 10),
    "logging_dir": ("logs", {"report_to": "tensorboard"}, lambda r: r.logger == ("tensorboard", "logs")),
    "logging_strategy": ("no", {}, lambda r: r.logger == "off"),
    "logging_steps": (10, {}, lambda r: r.trainer["log_every_n_steps"] == 10),
    "save_strategy": ("no", {}, lambda r: r.checkpoint is None),
    "save_steps": (20, {}, lambda r: r.checkpoint is not None and r.checkpoint["every_n_train_steps"] == 20),
    "save_total_limit": (2, {}, lambda r: r.checkpoint is not None and r.checkpoint["save_top_k"] == 2),
    "save_only_model": (True, {}, lambda r: r.checkpoint is not None and r.checkpoint["save_weights_only"]),
    "seed": (7, {}, lambda r: r.seed == 7),
    "bf16": (True, {}, lambda r: r.precision == "bf16-mixed"),
    "dataloader_drop_last": (True, {}, lambda r: r.dataloaders["train"]["drop_last"]),
    "eval_steps": (30, {"eval_strategy": "steps"}, lambda r: r.trainer.get("val_check_interval") == 30),
    "dataloader_num_workers": (2, {}, lambda r: r.dataloaders["train"]["num_workers"] == 2),
    "dataloader_prefetch_factor": (
        4,
        {"dataloader_num_workers": 2},
        lambda r: r.dataloaders["train"].get("prefetch_factor") == 4,
    ),
    "disable_tqdm": (True, {}, lambda r: r.trainer.get("enable_progress_bar") is False),
    "metric_for_best_model": (
        "eval_loss",
        {},
        lambda r: (
            r.checkpoint is not None and (r.checkpoint.get("monitor"), r.checkpoint.get("mode")) == ("eval_loss", "min")
        ),
    ),
    "greater_is_better": (
        True,
        {"metric_for_best_model": "eval_loss"},
        lambda r: r.checkpoint is not None and r.checkpoint["mode"] == "max",
    ),
    "fsdp": (
        "shard_grad_op",
        {},
        lambda r: r.strategy[0] == "fsdp" and r.strategy[1]["sharding_strategy"] == "SHARD_GRAD_OP",
    ),
    "fsdp_config": (
        {"fsdp_backward_prefetch": "backward_pre"},
        {"fsdp": "full_shard"},
        lambda r: r.strategy[0] == "fsdp" and "backward_prefetch" not in r.strategy[1],
    ),
    "fsdp_min_num_params": (
        1000,
        {"fsdp": "full_shard auto_wrap"},
        lambda r: getattr(r.strategy[1].get("auto_wrap_policy"), "min_num_params", None) == 1000,
    ),
    "fsdp_transformer_layer_cls_to_wrap": (
        "GaudiLlamaDecoderLayer",
        {"fsdp": "full_shard auto_wrap"},
        lambda r: getattr(r.strategy[1].get("auto_wrap_policy"), "names", None) == ("GaudiLlamaDecoderLayer",),
    ),
    "deepspeed": ({"zero_optimization": {"stage": 2}}, {}, lambda r: r.strategy[0] == "deepspeed"),
    "optim": ("sgd", {}, lambda r: r.optimizer["name"] == "sgd"),
    "report_to": ("none", {}, lambda r: r.logger == "off"),
    "ddp_find_unused_parameters": (True, {}, lambda r: r.strategy[1]["find_unused_parameters"] is True),
    "ddp_bucket_cap_mb": (100, {}, lambda r: r.strategy[1]["bucket_cap_mb"] == 100),
    "ddp_broadcast_buffers": (False, {}, lambda r: r.strategy[1].get("broadcast_buffers") is False),
    "dataloader_pin_memory": (False, {}, lambda r: r.dataloaders["eval"]["pin_memory"] is False),
    "dataloader_persistent_workers": (
        True,
        {"dataloader_num_workers": 2},
        lambda r: r.dataloaders["train"].get("persistent_workers") is True,
    ),
    "gradient_checkpointing": (True, {}, lambda r: "gradient_checkpointing" in r.model_setup),
    "gradient_checkpointing_kwargs": (
        {"use_reentrant": False},
        {"gradient_checkpointing": True},
        lambda r: r.model_setup["gradient_checkpointing"] == {"use_reentrant": False},
    ),
    "full_determinism": (True, {}, lambda r: r.trainer.get("deterministic") is True),
    "ddp_timeout": (60, {}, lambda r: r.strategy[1]["timeout"] == timedelta(seconds=60)),
    "torch_compile": (True, {}, lambda r: r.compile is not None and not r.lazy_mode),
    "include_tokens_per_second": (True, {}, lambda r: r.tokens_per_second),
    "gaudi_config_name": (
        str(DATA / "habana-gpt2.reconstructed.gaudi_config.json"),
        {},
        lambda r: r.precision == "bf16-mixed" and r.optimizer["fused"],
    ),
    "use_lazy_mode": (False, {}, lambda r: r.environment["PT_HPU_LAZY_MODE"] == "0"),
    "use_hpu_graphs": (
        True,
        {},
        lambda r: r.graphs is not None and r.graphs["stages"] == ("validate", "test", "predict"),
    ),
    "use_hpu_graphs_for_inference": (True, {}, lambda r: r.graphs is not None and "predict" in r.graphs["stages"]),
    "use_hpu_graphs_for_training": (True, {}, lambda r: r.graphs is not None and r.graphs["stages"] == ("fit",)),
    "use_compiled_autograd": (True, {"torch_compile": True}, lambda r: r.compile["compiled_autograd"]),
    "compile_from_sec_iteration": (True, {"torch_compile": True}, lambda r: r.compile["from_step"] == 1),
    "compile_dynamic": (False, {"torch_compile": True}, lambda r: r.compile["dynamic"] is False),
    "use_regional_compilation": (True, {"torch_compile": True}, lambda r: r.compile["regions"]),
    "max_hpu_graphs": (
        3,
        {"use_hpu_graphs_for_training": True},
        lambda r: r.graphs is not None and r.graphs["max_graphs"] == 3,
    ),
    "profiling_warmup_steps": (2, {"profiling_steps": 1}, lambda r: r.profiler["warmup"] == 2),
    "profiling_steps": (3, {}, lambda r: r.profiler is not None and r.profiler["active"] == 3),
    "profiling_record_shapes": (False, {"profiling_steps": 1}, lambda r: r.profiler["record_shapes"] is False),
    "profiling_with_stack": (True, {"profiling_steps": 1}, lambda r: r.profiler["with_stack"] is True),
    "attn_implementation": ("sdpa", {}, lambda r: r.model_kwargs["attn_implementation"] == "sdpa"),
    "flash_attention_recompute": (
        True,
        {"attn_implementation": "gaudi_fused_sdpa"},
        lambda r: r.model_setup["fused_sdpa"]["recompute"] is True,
    ),
    "flash_attention_fast_softmax": (
        True,
        {"attn_implementation": "gaudi_fused_sdpa"},
        lambda r: r.model_setup["fused_sdpa"]["softmax_mode"] == "fast",
    ),
    "flash_attention_causal_mask": (
        True,
        {"attn_implementation": "gaudi_fused_sdpa"},
        lambda r: r.model_setup["fused_sdpa"]["causal"] is True,
    ),
    "fp8": (True, {}, lambda r: r.precision == "fp8" and "fp8" in r.model_setup),
    "flash_attention_fp8": (
        True,
        {"fp8": True, "attn_implementation": "gaudi_fused_sdpa", "flash_attention_causal_mask": True},
        lambda r: (
            r.model_setup.get("fp8_fused_attention") == {"softmax_mode": "None"} and "fused_sdpa" not in r.model_setup
        ),
    ),
    "cache_size_limit": (64, {"torch_compile": True}, lambda r: r.dynamo == {"cache_size_limit": 64}),
    "inline_inbuilt_nn_modules": (False, {}, lambda r: r.dynamo == {"inline_inbuilt_nn_modules": False}),
    "allow_unspec_int_on_nn_module": (True, {}, lambda r: r.dynamo == {"allow_unspec_int_on_nn_module": True}),
    "pipelining_fwd_bwd": (True, {}, lambda r: r.pipelining),
    "adjust_throughput": (True, {}, lambda r: r.adjust_throughput),
    "sdp_on_bf16": (True, {}, lambda r: r.sdp_on_bf16),
    "use_zero3_leaf_promotion": (
        True,
        {"deepspeed": {"zero_optimization": {"stage": 3}}},
        lambda r: "zero3_leaf_promotion" in r.model_setup,
    ),
    "minimize_memory": (True, {"fp8": True}, lambda r: "fp8_minimize_memory" in r.model_setup),
    "throughput_warmup_steps": (
        3,
        {"gradient_accumulation_steps": 2},
        lambda r: r.throughput_warmup_batches == 6,
    ),
    "distribution_strategy": (
        "fast_ddp",
        {},
        lambda r: (
            r.strategy
            == ("fast_ddp", {"timeout": timedelta(seconds=1800), "buffer_dtype": "bfloat16", "use_hpu_graphs": True})
        ),
    ),
    "context_parallel_size": (2, {}, lambda r: r.strategy[0] == "context_parallel"),
}


def _import(source: str, fields: dict[str, Any], tmp_path: Path) -> OptimumImport:
    if source == "GaudiConfig":
        return import_optimum_habana(fields, {}, workdir=tmp_path)
    return import_optimum_habana(None, fields, workdir=tmp_path)


def _source(name: str) -> str:
    return "GaudiConfig" if name in FIELDS["GaudiConfig"] else "GaudiTrainingArguments"


def test_every_mapped_field_has_a_behaviour_test() -> None:
    mapped = {n for table in FIELDS.values() for n, row in table.items() if row.action == "mapped"}
    assert mapped == set(MAPPED)


@pytest.mark.parametrize("name", sorted(MAPPED))
def test_mapped_field_changes_the_import(name: str, tmp_path: Path) -> None:
    value, needs, shows = MAPPED[name]
    source = _source(name)
    without = _import(source, dict(needs), tmp_path)
    with_field = _import(source, {**needs, name: value}, tmp_path)
    assert shows(with_field)
    assert not shows(without)


def _other_value(default: Any) -> Any:
    if default is False:
        return True
    if default is True:
        return False
    if isinstance(default, int) and not isinstance(default, bool):
        return default + 2
    if isinstance(default, float):
        return default + 0.5
    return "bogus"


REFUSED = sorted(
    (row.source, name) for table in FIELDS.values() for name, row in table.items() if row.action == "refused"
)


@pytest.mark.parametrize(("source", "name"), REFUSED)
def test_refused_field_stops_the_import_with_its_reason(source: str, name: str, tmp_path: Path) -> None:
    row = FIELDS[source][name]
    value = _other_value(row.default)
    assert not row.accepted(value)
    with pytest.raises(ConfigurationError) as raised:
        _import(source, {name: value}, tmp_path)
    assert f"  {name}={value!r}: {row.reason} (accepted: the default, {row.default!r})" in str(raised.value)
    # The default itself requests nothing.
    _import(source, {name: row.default}, tmp_path)


def test_refusals_are_listed_together() -> None:
    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana(None, {"adafactor": True, "data_seed": 3})
    assert str(raised.value) == (
        "training_args: these settings have no lightning-accel equivalent and are refused rather than dropped:\n"
        "  adafactor=True: Adafactor is not supported yet (issue 46) (accepted: the default, False)\n"
        "  data_seed=3: a separate sampler seed is not supported yet (issue 46) (accepted: the default, None)\n"
        "Remove them (or set them to their default) to import the rest."
    )


def test_unknown_field_is_refused_naming_the_accepted_ones() -> None:
    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana({"use_fused_adamw": True})
    assert str(raised.value) == (
        "gaudi_config: unknown field(s) 'use_fused_adamw' (did you mean 'use_fused_adam'?): not a field of "
        "optimum-habana 1.21's GaudiConfig. Accepted: autocast_bf16_ops, autocast_fp32_ops, hmp_bf16_ops, "
        "hmp_fp32_ops, hmp_is_verbose, hmp_opt_level, optimum_version, transformers_version, use_dynamic_shapes, "
        "use_fused_adam, use_fused_clip_norm, use_habana_mixed_precision, use_torch_autocast."
    )
    with pytest.raises(ConfigurationError, match=r"unknown field\(s\) 'learning_rat' \(did you mean 'learning_rate'"):
        import_optimum_habana(None, {"learning_rat": 1e-3})


def test_the_docs_table_is_the_importers_table() -> None:
    docs = (REPO / "docs" / "migration.md").read_text(encoding="utf-8")
    assert docs_block() in docs
    for table in FIELDS.values():
        for row in table.values():
            assert row.target if row.action == "mapped" else row.reason, row.name


def test_the_table_has_every_field_of_optimum_habana_1_21() -> None:
    # GaudiConfig's six fields, the five pre-1.9 HMP names and the two version stamps; GaudiTrainingArguments'
    # 43 fields on top of transformers 4.55's 130 init fields (six of them overridden).
    assert len(FIELDS["GaudiConfig"]) == 13
    assert len(FIELDS["GaudiTrainingArguments"]) == 167
    assert list(FIELDS["GaudiTrainingArguments"])[-1] == "fp8"


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.name.split(".")[0])
def test_published_configs_import(path: Path, tmp_path: Path) -> None:
    run = import_optimum_habana(path, {"output_dir": str(tmp_path)})
    assert (run.precision, run.optimizer["fused"], run.fused_clip_norm) == ("bf16-mixed", True, True)


def test_pre_1_9_hmp_config_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana(DATA / "habana-gpt2.pre-1.9-hmp.reconstructed.gaudi_config.json")
    assert "use_habana_mixed_precision=True: Habana Mixed Precision was removed from the SDK" in str(raised.value)
    assert "For mixed precision set use_torch_autocast: true" in str(raised.value)
    # With HMP off, the old fields are inert on both sides.
    run = import_optimum_habana({"use_habana_mixed_precision": False, "hmp_bf16_ops": ["iadd"], "hmp_opt_level": "O2"})
    assert run.precision == "32-true"


def test_inputs_as_dict_file_folder_and_objects(tmp_path: Path) -> None:
    class IntervalStrategy(enum.Enum):
        EPOCH = "epoch"

    @dataclasses.dataclass
    class GaudiTrainingArguments:  # stands for optimum-habana's, whose fields are init fields of a dataclass
        output_dir: str = "out"
        eval_strategy: Any = IntervalStrategy.EPOCH
        learning_rate: float = 1e-3
        _n_gpu: int = dataclasses.field(default=1, init=False)

    class GaudiConfig:  # keeps its fields as attributes
        def __init__(self) -> None:
            self.use_torch_autocast = True
            self.use_fused_adam = True
            self._private = "bookkeeping"

    run = import_optimum_habana(GaudiConfig(), GaudiTrainingArguments(), workdir=tmp_path)
    assert run.precision == "bf16-mixed" and run.optimizer["fused"] and run.optimizer["lr"] == 1e-3
    assert run.trainer["check_val_every_n_epoch"] == 1

    (tmp_path / "gaudi_config.json").write_text(json.dumps({"use_fused_clip_norm": True}))
    (tmp_path / "args.json").write_text(json.dumps({"max_steps": 3}))
    run = import_optimum_habana(tmp_path, tmp_path / "args.json")
    assert run.fused_clip_norm and run.trainer["max_steps"] == 3

    with pytest.raises(ConfigurationError, match="no such file"):
        import_optimum_habana(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ConfigurationError, match="holds a JSON list, not an object"):
        import_optimum_habana(None, tmp_path / "list.json")
    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana(None, {"gaudi_config_name": "Habana/gpt2"})
    assert str(raised.value).startswith(
        "gaudi_config_name='Habana/gpt2' is no local file or folder, and the importer downloads nothing."
    )


def test_combinations_that_would_do_nothing_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="use_regional_compilation set without torch_compile=True"):
        import_optimum_habana(None, {"use_regional_compilation": True})
    with pytest.raises(ConfigurationError, match="autocast_bf16_ops is given but nothing turns on mixed precision"):
        import_optimum_habana({"autocast_bf16_ops": ["linear"]})
    with pytest.raises(ConfigurationError, match="HPU graphs need lazy mode"):
        import_optimum_habana(None, {"use_lazy_mode": False, "use_hpu_graphs_for_inference": True})
    with pytest.raises(ConfigurationError, match="HPUGraphs and HPUCompile are not combined"):
        import_optimum_habana(None, {"torch_compile": True, "use_hpu_graphs_for_training": True})
    with pytest.raises(ConfigurationError, match="flash_attention_causal_mask need attn_implementation"):
        import_optimum_habana(None, {"flash_attention_causal_mask": True})


def test_scheduler_follows_the_hugging_face_shapes(tmp_path: Path) -> None:
    import torch
    from lightning.pytorch import LightningModule

    class Module(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)
            self.norm = torch.nn.LayerNorm(2)

    class FakeTrainer:
        estimated_stepping_batches = 10

    module = Module()
    module.trainer = FakeTrainer()  # type: ignore[assignment]
    run = import_optimum_habana(None, {"warmup_steps": 2, "weight_decay": 0.1}, workdir=tmp_path)
    configured = run.configure_optimizers(module)
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    assert [len(g["params"]) for g in optimizer.param_groups] == [1, 3]  # only the Linear weight decays
    factors = []
    for _ in range(10):
        factors.append(scheduler.get_last_lr()[0] / 5e-5)
        optimizer.step()
        scheduler.step()
    assert factors[:3] == pytest.approx([0.0, 0.5, 1.0])
    assert factors[-1] == pytest.approx(1 / 8)


def _learning_rates(run: OptimumImport, steps: int) -> list[float]:
    import torch
    from lightning.pytorch import LightningModule

    class FakeTrainer:
        estimated_stepping_batches = steps

    module = LightningModule()
    module.layer = torch.nn.Linear(2, 2)
    module.trainer = FakeTrainer()  # type: ignore[assignment]
    configured = run.configure_optimizers(module)
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(steps):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize(
    ("kind", "kwargs", "expected"),
    [
        # Two cosine cycles over 10 steps: back at the full rate at step 5.
        ("cosine_with_restarts", {"num_cycles": 2}, lambda s: 0.5 * (1 + math.cos(math.pi * ((2 * s / 10) % 1)))),
        # (1 - s/10)^2 from 1e-2 down to lr_end.
        ("polynomial", {"power": 2.0, "lr_end": 1e-4}, lambda s: ((1 - s / 10) ** 2 * (1e-2 - 1e-4) + 1e-4) / 1e-2),
        # Half a cosine that ends at a tenth of the rate.
        ("cosine_with_min_lr", {"min_lr_rate": 0.1}, lambda s: 0.5 * (1 + math.cos(math.pi * s / 10)) * 0.9 + 0.1),
    ],
    ids=["cosine_with_restarts", "polynomial", "cosine_with_min_lr"],
)
def test_scheduler_kwargs_shape_the_schedule_as_transformers_does(
    kind: str, kwargs: dict[str, Any], expected: Callable[[int], float], tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    fields = {"learning_rate": 1e-2, "lr_scheduler_type": kind, "lr_scheduler_kwargs": kwargs}
    rates = _learning_rates(import_optimum_habana(None, fields, workdir=tmp_path), 10)
    assert rates == pytest.approx([1e-2 * expected(s) for s in range(10)])


def test_scheduler_arguments_transformers_would_refuse_are_refused_at_import() -> None:
    pytest.importorskip("transformers")
    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana(None, {"lr_scheduler_type": "cosine", "lr_scheduler_kwargs": {"cycles": 2}})
    message = str(raised.value)
    assert "lr_scheduler_type='cosine' with lr_scheduler_kwargs={'cycles': 2}: transformers' get_scheduler refuses" in (
        message
    )
    assert "'cycles'" in message
    with pytest.raises(ConfigurationError, match=r"lr_scheduler_type='reduce_lr_on_plateau' steps on an evaluation"):
        import_optimum_habana(None, {"lr_scheduler_type": "reduce_lr_on_plateau"})
    with pytest.raises(ConfigurationError, match=r"lr_scheduler_type='bogus' with lr_scheduler_kwargs=\{\}: transf"):
        import_optimum_habana(None, {"lr_scheduler_type": "bogus"})
    with pytest.raises(ConfigurationError, match=r"lr_scheduler_kwargs=\[2\] is not accepted. Accepted: a dict"):
        import_optimum_habana(None, {"lr_scheduler_kwargs": [2]})


def test_a_weight_shared_by_two_modules_is_optimized_once(tmp_path: Path) -> None:
    import torch
    from lightning.pytorch import LightningModule

    class Tied(LightningModule):  # as GPT-2's input embedding and output layer
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(4, 2)
            self.head = torch.nn.Linear(2, 4, bias=False)
            self.head.weight = self.embed.weight

    class FakeTrainer:
        estimated_stepping_batches = 10

    module = Tied()
    module.trainer = FakeTrainer()  # type: ignore[assignment]
    optimizer = import_optimum_habana(None, {}, workdir=tmp_path).configure_optimizers(module)["optimizer"]
    assert [len(g["params"]) for g in optimizer.param_groups] == [1, 0]


def test_operator_lists_reach_the_precision_plugin(tmp_path: Path) -> None:
    # The SDK reads the list files once, when it loads (at `import torch` in eager mode): the documented flow is to
    # start the run's process with run.environment (run.export_lines()), as here.
    config = DATA / "autocast-lists.gaudi_config.json"
    arguments = {"use_lazy_mode": False}
    run = import_optimum_habana(config, arguments, workdir=tmp_path)
    lists = tmp_path.resolve() / "lightning_accel_autocast"
    assert run.export_lines().splitlines() == [
        "export PT_HPU_LAZY_MODE=0",
        f"export PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST={lists}/autocast_bf16_ops.txt",
        f"export PT_HPU_AUTOCAST_FP32_OPS_LIST={lists}/autocast_fp32_ops.txt",
    ]
    assert (tmp_path / "lightning_accel_autocast" / "autocast_fp32_ops.txt").read_text() == (
        "embedding\nnll_loss\nlog_softmax\n"
    )
    script = textwrap.dedent(
        f"""
        from lightning_accel.habana.optimum import import_optimum_habana
        run = import_optimum_habana({str(config)!r}, {arguments!r}, workdir={str(tmp_path)!r})
        plugin = run.precision_plugin()
        print(plugin.precision, sorted(plugin.lower_ops), sorted(plugin.fp32_ops), plugin.fused_clip_norm)
        """
    )
    env = {**os.environ, **run.environment, "LIGHTNING_ACCEL_EMULATE": "hpu"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "bf16-mixed ['addmm', 'bmm', 'linear', 'matmul', 'mm', 'softmax'] ['embedding', 'log_softmax', 'nll_loss'] "
        "True",
    ]


def test_trainer_kwargs_refuse_the_other_sdk_mode(eager_mode: None, tmp_path: Path) -> None:
    run = import_optimum_habana(DATA / "habana-gpt2.reconstructed.gaudi_config.json", {"output_dir": str(tmp_path)})
    with pytest.raises(ConfigurationError) as raised:
        run.trainer_kwargs()
    assert str(raised.value) == (
        "The imported run needs the SDK's lazy mode (use_lazy_mode=True (optimum-habana's default) and no "
        "torch_compile), but the SDK loaded in eager mode. The mode is chosen when the SDK loads: start the process "
        "with\n    export PT_HPU_LAZY_MODE=1\nor change use_lazy_mode in the training arguments."
    )


def _tiny_lm(run: OptimumImport) -> Any:
    import torch
    from lightning.pytorch import LightningModule

    class TinyLM(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(32, 16)
            self.head = torch.nn.Linear(16, 32)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.head(self.embed(tokens))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            (tokens,) = batch
            logits = self(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 32), tokens[:, 1:].reshape(-1))
            self.losses.append(loss.item())
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.validated += 1

        def configure_optimizers(self) -> Any:
            return run.configure_optimizers(self)

    module = TinyLM()
    module.losses = []  # type: ignore[assignment]
    module.validated = 0  # type: ignore[assignment]
    return module


def _tokens() -> Any:
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randint(0, 32, (32, 9), generator=generator))


def test_gpt2_config_and_arguments_fit_two_steps(lazy_mode: None, tmp_path: Path) -> None:
    from lightning.pytorch import Trainer
    from torch.utils.data import DataLoader

    from lightning_accel.habana import HPUGraphs, HPUPrecisionPlugin

    arguments = {
        "output_dir": str(tmp_path),
        "use_habana": True,
        "use_lazy_mode": True,
        "use_hpu_graphs_for_inference": True,
        "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 4,
        "learning_rate": 1e-2,
        "max_steps": 2,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
    }
    run = import_optimum_habana(DATA / "habana-gpt2.reconstructed.gaudi_config.json", arguments)
    trainer = Trainer(**run.trainer_kwargs(batch_size_fn=lambda batch: batch[0].shape[0]))
    module = _tiny_lm(run)
    val_loader = DataLoader(_tokens(), **run.dataloader_kwargs("eval"))
    trainer.fit(module, DataLoader(_tokens(), **run.dataloader_kwargs("train")), val_loader)

    assert trainer.global_step == 2 and len(module.losses) == 2
    assert module.validated == 0  # eval_strategy "no" (the default): no validation inside fit, no sanity check
    trainer.validate(module, val_loader)  # --do_eval
    assert module.validated == 8  # 32 samples, per_device_eval_batch_size 4
    plugin = trainer.precision_plugin
    assert isinstance(plugin, HPUPrecisionPlugin) and plugin.precision == "bf16-mixed" and plugin.fused_clip_norm
    assert type(trainer.optimizers[0]).__name__ == "FusedAdamW"
    assert any(isinstance(c, HPUGraphs) and c.stages == ("validate", "test", "predict") for c in trainer.callbacks)
    assert trainer.gradient_clip_val == 1.0 and trainer.max_epochs == -1


def test_load_best_model_at_end_ends_fit_on_the_best_checkpoints_weights(eager_mode: None, tmp_path: Path) -> None:
    import torch
    from lightning.pytorch import Trainer
    from torch.utils.data import DataLoader

    arguments = {
        "output_dir": str(tmp_path),
        "use_habana": True,
        "use_lazy_mode": False,
        "learning_rate": 1e-1,
        "max_steps": 3,
        "eval_strategy": "steps",
        "eval_steps": 1,
        "save_strategy": "steps",
        "save_steps": 1,
        "load_best_model_at_end": True,
        "report_to": "none",
    }
    run = import_optimum_habana(None, arguments)
    assert run.checkpoint is not None and (run.checkpoint["monitor"], run.checkpoint["mode"]) == ("eval_loss", "min")
    module = _tiny_lm(run)
    scores = iter([0.5, 0.1, 0.9])  # the evaluation after step 2 is the best
    weights: list[torch.Tensor] = []

    def validation_step(batch: Any, batch_idx: int) -> None:
        if batch_idx == 0 and not module.trainer.sanity_checking:
            weights.append(module.head.weight.detach().cpu().clone())
            module.log("eval_loss", next(scores))

    module.validation_step = validation_step  # type: ignore[method-assign]
    trainer = Trainer(**{**run.trainer_kwargs(devices=1), "enable_progress_bar": False, "logger": False})
    tokens = DataLoader(_tokens(), **run.dataloader_kwargs("train"))
    trainer.fit(module, tokens, DataLoader(_tokens(), batch_size=32))

    assert len(weights) == 3 and not torch.equal(weights[1], weights[2])
    assert trainer.checkpoint_callback.best_model_path.endswith("step=2.ckpt")
    torch.testing.assert_close(module.head.weight.detach().cpu(), weights[1], rtol=0, atol=0)


def test_fast_ddp_packs_without_graphs_beside_hpu_graphs_for_training() -> None:
    run = import_optimum_habana(None, {"distribution_strategy": "fast_ddp", "use_hpu_graphs_for_training": True})
    assert run.strategy[0] == "fast_ddp" and run.strategy[1]["use_hpu_graphs"] is False
    assert run.graphs is not None and "fit" in run.graphs["stages"]
    assert import_optimum_habana(None, {"distribution_strategy": "fast_ddp"}).strategy[1]["use_hpu_graphs"] is True


def test_fsdp_config_becomes_the_fsdp_strategys_arguments(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    config_file = tmp_path / "fsdp_config.json"
    config_file.write_text(
        json.dumps(
            {
                "fsdp_transformer_layer_cls_to_wrap": "GaudiLlamaDecoderLayer",
                "fsdp_activation_checkpointing": True,
                "fsdp_backward_prefetch": "BACKWARD_PRE",
                "fsdp_forward_prefetch": True,
            }
        )
    )
    run = import_optimum_habana(None, {"fsdp": "full_shard auto_wrap", "fsdp_config": str(config_file)})
    kind, arguments = run.strategy
    assert kind == "fsdp" and "backward_prefetch" not in arguments  # torch's default is BACKWARD_PRE
    assert (arguments["forward_prefetch"], arguments["sync_module_states"], arguments["use_orig_params"]) == (
        True,
        True,
        True,
    )
    policy = arguments["auto_wrap_policy"]
    assert arguments["activation_checkpointing_policy"] is policy and run.model_setup["no_kv_cache"]
    model = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, vocab_size=64
        )
    )
    assert policy(module=model, recurse=True, nonwrapped_numel=0)  # the root: the names resolve here
    wrapped = [type(m).__name__ for m in model.modules() if policy(module=m, recurse=False, nonwrapped_numel=0)]
    assert wrapped == ["LlamaDecoderLayer", "LlamaDecoderLayer"]
    # Without names, the model's _no_split_modules (accelerate's default).
    default = import_optimum_habana(None, {"fsdp": "full_shard auto_wrap"}).strategy[1]["auto_wrap_policy"]
    default(module=model, recurse=True, nonwrapped_numel=0)
    assert default(module=model.model.layers[0], recurse=False, nonwrapped_numel=0)
    assert import_optimum_habana(None, {"fsdp": "full_shard"}).strategy[1]["backward_prefetch"] is None
    size = import_optimum_habana(None, {"fsdp": "full_shard auto_wrap", "fsdp_min_num_params": 100}).strategy[1][
        "auto_wrap_policy"
    ]
    assert size(module=model.model.layers[0], recurse=False, nonwrapped_numel=1000)
    assert not size(module=model.model.layers[0], recurse=False, nonwrapped_numel=10)
    assert not size(module=model.model.layers, recurse=False, nonwrapped_numel=1000)  # a ModuleList is never called
    run.prepare_model(model)
    assert model.config.use_cache is False
    wrong = import_optimum_habana(None, {"fsdp": "full_shard auto_wrap", "fsdp_transformer_layer_cls_to_wrap": "Blk"})
    with pytest.raises(ConfigurationError, match=r"transformer_layer_cls_to_wrap=\['Blk'\] names no layer of Llama"):
        wrong.strategy[1]["auto_wrap_policy"](module=model, recurse=True, nonwrapped_numel=0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"fsdp_config": {"fsdp_version": 2}}, "fsdp_config keys 'version' are not read by optimum-habana 1.21"),
        ({"fsdp_config": {"xla": True}}, "the XLA keys are for TPUs"),
        ({"fsdp_min_num_params": 10, "fsdp_transformer_layer_cls_to_wrap": "X"}, "are mutually exclusive"),
        ({"fsdp_config": {"min_num_params": 10}, "fsdp": "full_shard"}, "without 'auto_wrap' in fsdp: optimum-habana"),
        ({"fsdp_config": {"backward_prefetch": "backward_post"}}, "backward_prefetch='backward_post' is not supported"),
        ({"fsdp_config": {"cpu_ram_efficient_loading": "true"}}, "cpu_ram_efficient_loading=true steers how"),
        ({"fsdp_config": {"activation_checkpointing": True}, "fsdp": "full_shard"}, "activation_checkpointing=true wi"),
    ],
    ids=["unknown-key", "xla", "both-policies", "no-auto_wrap", "backward_post", "ram-loading", "checkpointing-alone"],
)
def test_fsdp_config_that_would_not_run_as_asked_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        import_optimum_habana(None, {"fsdp": "full_shard auto_wrap", **fields})


def test_load_best_model_at_end_needs_the_evaluations_it_ranks() -> None:
    with pytest.raises(ConfigurationError, match=r"load_best_model_at_end=True with save_strategy='steps' and eval_"):
        import_optimum_habana(None, {"load_best_model_at_end": True, "save_strategy": "steps"})
    with pytest.raises(ConfigurationError, match=r"save_steps=3 not a multiple of eval_steps=2"):
        fields = {"eval_strategy": "steps", "eval_steps": 2, "save_strategy": "steps", "save_steps": 3}
        import_optimum_habana(None, {"load_best_model_at_end": True, **fields})


@pytest.mark.filterwarnings("ignore::jsonargparse._deprecated.JsonargparseDeprecationWarning")
def test_lightning_cli_takes_the_files(tmp_path: Path) -> None:
    import torch
    from lightning.pytorch import LightningModule

    from lightning_accel.habana import HPUPrecisionPlugin
    from lightning_accel.habana.optimum import OptimumHabanaCLI

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

    args = tmp_path / "training_args.json"
    args.write_text(json.dumps({"use_lazy_mode": False, "max_steps": 5, "gradient_accumulation_steps": 2}))
    cli = OptimumHabanaCLI(
        Model,
        run=False,
        args=[
            "--optimum.gaudi_config",
            str(DATA / "habana-gpt2.reconstructed.gaudi_config.json"),
            "--optimum.training_args",
            str(args),
            "--trainer.accumulate_grad_batches",
            "3",
            f"--trainer.default_root_dir={tmp_path}",
        ],
    )
    assert cli.optimum is not None and cli.optimum.optimizer["fused"]
    assert cli.trainer.max_steps == 5  # from the import
    assert cli.trainer.accumulate_grad_batches == 3  # the command line wins
    assert isinstance(cli.trainer.precision_plugin, HPUPrecisionPlugin)
    assert cli.trainer.precision_plugin.fused_clip_norm
    assert len(cli.trainer.checkpoint_callbacks) == 1  # the imported one (every 500 steps), not beside the default


def test_every_field_at_its_default_requests_nothing(tmp_path: Path) -> None:
    # What GaudiTrainingArguments.to_dict() gives for an untouched run: every field, each at its default.
    every = {
        source: {name: row.default for name, row in FIELDS[source].items()}
        for source in ("GaudiConfig", "GaudiTrainingArguments")
    }
    full = import_optimum_habana(every["GaudiConfig"], every["GaudiTrainingArguments"], workdir=tmp_path)
    empty = import_optimum_habana({}, {}, workdir=tmp_path)
    assert dataclasses.replace(full, given={}) == dataclasses.replace(empty, given={})


def test_trainer_kwargs_build_the_pieces(eager_mode: None, tmp_path: Path) -> None:
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lightning_accel.habana import HPUCompile, HPUCompileMetrics, HPUParallelStrategy, HPUProfiler

    arguments = {
        "output_dir": str(tmp_path),
        "torch_compile": True,
        "use_regional_compilation": True,
        "compile_from_sec_iteration": True,
        "profiling_steps": 2,
        "save_total_limit": 2,
        "report_to": "none",
    }
    run = import_optimum_habana(DATA / "habana-llama.reconstructed.gaudi_config.json", arguments)
    trainer = Trainer(**run.trainer_kwargs(devices=2))
    compiled = [c for c in trainer.callbacks if isinstance(c, HPUCompile)]
    assert len(compiled) == 1 and compiled[0].regions and compiled[0].from_step == 1
    assert any(isinstance(c, HPUCompileMetrics) for c in trainer.callbacks)
    (checkpoint,) = [c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)]
    assert (checkpoint.dirpath, checkpoint.save_top_k, checkpoint.monitor) == (str(tmp_path), 2, "step")
    assert isinstance(trainer.profiler, HPUProfiler)
    assert trainer.logger is None
    assert isinstance(trainer.strategy, HPUParallelStrategy)


def test_model_settings_refuse_a_model_never_prepared(eager_mode: None, tmp_path: Path) -> None:
    from lightning.pytorch import Trainer
    from torch.utils.data import DataLoader

    arguments = {"use_lazy_mode": False, "gradient_checkpointing": True, "max_steps": 1, "output_dir": str(tmp_path)}
    run = import_optimum_habana(None, arguments)
    module = _tiny_lm(run)
    with pytest.raises(ConfigurationError, match="TinyLM has no gradient_checkpointing_enable"):
        run.prepare_model(module)
    trainer = Trainer(**run.trainer_kwargs(), enable_progress_bar=False, logger=False)
    with pytest.raises(ConfigurationError) as raised:
        trainer.fit(module, DataLoader(_tokens(), batch_size=4))
    assert str(raised.value).startswith(
        "The imported arguments ask for gradient_checkpointing on the model, but prepare_model(model) was not called"
    )


def test_the_knobs_become_callbacks(lazy_mode: None, tmp_path: Path) -> None:
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import ThroughputMonitor

    from lightning_accel.habana.adjusted_throughput import AdjustedThroughputMonitor
    from lightning_accel.habana.dynamo_settings import DynamoSettings
    from lightning_accel.habana.lazy_steps import PipelineForwardBackward
    from lightning_accel.habana.sdp_settings import SDPOnBF16

    arguments = {
        "output_dir": str(tmp_path),
        "inline_inbuilt_nn_modules": True,
        "allow_unspec_int_on_nn_module": True,
        "pipelining_fwd_bwd": True,
        "adjust_throughput": True,
        "sdp_on_bf16": True,
        "non_blocking_data_copy": True,
        "report_to": "none",
    }
    run = import_optimum_habana(None, arguments)
    with pytest.raises(ConfigurationError, match=r"adjust_throughput=True: pass trainer_kwargs\(batch_size_fn=...\)"):
        run.trainer_kwargs()
    trainer = Trainer(**run.trainer_kwargs(batch_size_fn=len))
    kinds = {type(c) for c in trainer.callbacks}
    assert {DynamoSettings, PipelineForwardBackward, SDPOnBF16, AdjustedThroughputMonitor} <= kinds
    assert ThroughputMonitor not in kinds
    (dynamo,) = [c for c in trainer.callbacks if isinstance(c, DynamoSettings)]
    assert dynamo.settings == {"inline_inbuilt_nn_modules": True, "allow_unspec_int_on_nn_module": True}


def test_knob_combinations_that_would_do_nothing_are_refused() -> None:
    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana(None, {"pipelining_fwd_bwd": True, "use_lazy_mode": False})
    assert str(raised.value).startswith(
        "training_args: pipelining_fwd_bwd=True with use_lazy_mode=False or torch_compile=True: it adds a lazy-mode "
        "graph boundary"
    )
    with pytest.raises(ConfigurationError, match="cache_size_limit set without torch_compile=True"):
        import_optimum_habana(None, {"cache_size_limit": 64})
    with pytest.raises(ConfigurationError, match=r"training_args: DynamoSettings\(cache_size_limit=0\) is not"):
        import_optimum_habana(None, {"cache_size_limit": 0, "torch_compile": True})


def test_context_parallel_size_builds_the_context_parallel_strategy(eager_mode: None) -> None:
    from lightning.pytorch import Trainer

    from lightning_accel.habana import HPUContextParallelStrategy

    run = import_optimum_habana(None, {"context_parallel_size": 2, "ddp_timeout": 60, "use_lazy_mode": False})
    assert run.strategy == (
        "context_parallel",
        {
            "find_unused_parameters": False,
            "bucket_cap_mb": 230,
            "timeout": timedelta(seconds=60),
            "context_parallel_size": 2,
        },
    )
    # On one device too: the strategy, not "auto", so that its set-up refuses a size the world size cannot hold.
    for devices in (1, 2):
        strategy = Trainer(**run.trainer_kwargs(devices=devices)).strategy
        assert isinstance(strategy, HPUContextParallelStrategy)
        assert strategy.context_parallel_size == 2


def test_context_parallel_size_refuses_what_it_cannot_join() -> None:
    with pytest.raises(
        ConfigurationError, match=r"training_args: context_parallel_size=0 is not accepted. Accepted: an"
    ):
        import_optimum_habana(None, {"context_parallel_size": 0})
    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana(None, {"context_parallel_size": 2, "distribution_strategy": "fast_ddp"})
    assert str(raised.value) == (
        "training_args: context_parallel_size=2 with distribution_strategy='fast_ddp' is not supported yet (issue "
        "46): context parallelism runs on DDP (HPUContextParallelStrategy). Drop one of them."
    )
    with pytest.raises(ConfigurationError, match=r"context_parallel_size=2 with fsdp is not supported yet"):
        import_optimum_habana(None, {"context_parallel_size": 2, "fsdp": "full_shard"})
    with pytest.raises(ConfigurationError, match=r"context_parallel_size=2 with torch_compile=True is not supported"):
        import_optimum_habana(None, {"context_parallel_size": 2, "torch_compile": True, "use_lazy_mode": False})
    fp8_attention = {
        "fp8": True,
        "attn_implementation": "gaudi_fused_sdpa",
        "flash_attention_causal_mask": True,
        "flash_attention_fp8": True,
    }
    with pytest.raises(ConfigurationError, match=r"context_parallel_size=2 with flash_attention_fp8=True is not"):
        import_optimum_habana(None, {"context_parallel_size": 2, **fp8_attention})
    # FusedSDPA (gaudi_fused_sdpa) attends over the group: accepted.
    run = import_optimum_habana(None, {"context_parallel_size": 2, "attn_implementation": "gaudi_fused_sdpa"})
    assert run.strategy[0] == "context_parallel" and "fused_sdpa" in run.model_setup
