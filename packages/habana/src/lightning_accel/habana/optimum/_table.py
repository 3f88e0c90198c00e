"""The importer's one table: what becomes of each field of optimum-habana's ``GaudiConfig`` and training arguments.

Every field of optimum-habana 1.21 (``GaudiConfig`` and ``GaudiTrainingArguments``, which extends transformers
4.55's ``TrainingArguments``) has one row: ``mapped`` (to the target named), ``refused`` (a value other than the
accepted ones stops the import, with the reason) or ``ignored`` (no bearing on a Lightning run, with the reason).
The docs' table (``docs/migration.md``) is generated from these rows by :func:`markdown_table`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "DOCS_END",
    "DOCS_START",
    "FIELDS",
    "GAUDI_CONFIG",
    "ISSUE",
    "TRAINING_ARGUMENTS",
    "Field",
    "docs_block",
    "markdown_table",
]

Action = Literal["mapped", "refused", "ignored"]
Source = Literal["GaudiConfig", "GaudiTrainingArguments"]
ISSUE = "issue 46"
_NOT_YET = f"not supported yet ({ISSUE})"


def _any(value: Any) -> bool:
    return True


def _falsy(value: Any) -> bool:
    # The unset forms a value takes in a dict, in JSON, or after TrainingArguments.__post_init__ ('' -> []).
    return value in (None, False, 0, "", [], {}, "no", "none", ["none"])


def _one_of(*accepted: Any) -> Callable[[Any], bool]:
    return lambda value: value in accepted


@dataclass(frozen=True)
class Field:
    """One row of the table.

    Attributes:
        name: The field's name, as optimum-habana spells it.
        source: ``"GaudiConfig"`` or ``"GaudiTrainingArguments"``.
        default: optimum-habana 1.21's default (the value an absent field takes).
        action: ``"mapped"``, ``"refused"`` or ``"ignored"``.
        target: What it maps to in lightning-accel (for mapped fields).
        reason: Why it is refused or ignored, or a note on the mapping.
        accepted: For refused fields, the values that request nothing and pass (the default's forms).
    """

    name: str
    source: Source
    default: Any
    action: Action
    target: str = ""
    reason: str = ""
    accepted: Callable[[Any], bool] = _any


def _m(source: Source, name: str, default: Any, target: str, reason: str = "") -> Field:
    return Field(name, source, default, "mapped", target, reason)


def _r(source: Source, name: str, default: Any, reason: str, accepted: Callable[[Any], bool] = _falsy) -> Field:
    return Field(name, source, default, "refused", "", reason, accepted)


def _i(source: Source, name: str, default: Any, reason: str) -> Field:
    return Field(name, source, default, "ignored", "", reason)


_G: Source = "GaudiConfig"
_T: Source = "GaudiTrainingArguments"
_HF_LOOP = "steers the Hugging Face Trainer's own loop, which Lightning replaces"
_EVAL_LOOP = "steers the Hugging Face Trainer's evaluation loop; in Lightning your validation_step decides this"
_HUB = "read only with push_to_hub, which is refused"

GAUDI_CONFIG: tuple[Field, ...] = (
    _m(_G, "use_torch_autocast", False, "precision 'bf16-mixed' (HPUPrecisionPlugin)"),
    _m(
        _G,
        "autocast_bf16_ops",
        None,
        "HPUPrecisionPlugin(bf16_file_path=...): the names written to a list file",
        "needs mixed precision; each list works alone (optimum-habana used them only when both were given)",
    ),
    _m(_G, "autocast_fp32_ops", None, "HPUPrecisionPlugin(fp32_file_path=...): the names written to a list file"),
    _r(
        _G,
        "use_dynamic_shapes",
        False,
        f"the SDK's dynamic-shape switch (lazy mode) is {_NOT_YET}",
    ),
    _m(_G, "use_fused_adam", False, "the optimizer of configure_optimizers(): fused_adamw (the SDK's FusedAdamW)"),
    _m(
        _G,
        "use_fused_clip_norm",
        False,
        "HPUPrecisionPlugin(fused_clip_norm=True); with a precision string: the HPUFusedClipNorm() callback",
    ),
    _r(
        _G,
        "use_habana_mixed_precision",
        False,
        "Habana Mixed Precision was removed from the SDK, and optimum-habana 1.9 and later drop this field without a "
        "word (such runs were float32). For mixed precision set use_torch_autocast: true",
    ),
    _i(_G, "hmp_bf16_ops", None, "read only with use_habana_mixed_precision (removed; HMP's names are not ATen names)"),
    _i(_G, "hmp_fp32_ops", None, "read only with use_habana_mixed_precision (removed)"),
    _i(_G, "hmp_is_verbose", False, "read only with use_habana_mixed_precision (removed)"),
    _i(_G, "hmp_opt_level", "O1", "read only with use_habana_mixed_precision (removed)"),
    _i(_G, "optimum_version", None, "a version stamp save_pretrained writes"),
    _i(_G, "transformers_version", None, "a version stamp save_pretrained writes"),
)

TRAINING_ARGUMENTS: tuple[Field, ...] = (
    _m(_T, "output_dir", None, "Trainer(default_root_dir=...); ModelCheckpoint(dirpath=<output_dir>)"),
    _i(_T, "overwrite_output_dir", False, "read by run_clm.py before training; Lightning never deletes an output"),
    _i(_T, "do_train", False, "script flags: call trainer.fit / validate / predict"),
    _i(_T, "do_eval", False, "script flags: call trainer.fit / validate / predict"),
    _i(_T, "do_predict", False, "script flags: call trainer.fit / validate / predict"),
    _m(
        _T,
        "eval_strategy",
        "no",
        "'no': no validation inside fit (a callback; trainer.validate still runs); 'steps': "
        "val_check_interval=eval_steps; 'epoch': check_val_every_n_epoch=1",
    ),
    _r(_T, "prediction_loss_only", False, _EVAL_LOOP),
    _m(_T, "per_device_train_batch_size", 8, "dataloaders['train']['batch_size']"),
    _m(_T, "per_device_eval_batch_size", 8, "dataloaders['eval']['batch_size']"),
    _m(_T, "per_gpu_train_batch_size", None, "dataloaders['train']['batch_size'] (deprecated alias, wins when set)"),
    _m(_T, "per_gpu_eval_batch_size", None, "dataloaders['eval']['batch_size'] (deprecated alias, wins when set)"),
    _m(_T, "gradient_accumulation_steps", 1, "Trainer(accumulate_grad_batches=...)"),
    _r(_T, "eval_accumulation_steps", None, _EVAL_LOOP),
    _r(_T, "eval_delay", 0, f"{_HF_LOOP}; {_NOT_YET}"),
    _r(_T, "torch_empty_cache_steps", None, _NOT_YET),
    _m(_T, "learning_rate", 5e-05, "optimizer lr (configure_optimizers())"),
    _m(_T, "weight_decay", 0.0, "optimizer weight_decay"),
    _m(_T, "adam_beta1", 0.9, "optimizer betas[0]"),
    _m(_T, "adam_beta2", 0.999, "optimizer betas[1]"),
    _m(_T, "adam_epsilon", 1e-06, "optimizer eps"),
    _m(_T, "max_grad_norm", 1.0, "Trainer(gradient_clip_val=..., gradient_clip_algorithm='norm'); 0: no clipping"),
    _m(_T, "num_train_epochs", 3.0, "Trainer(max_epochs=...) (a whole number; max_steps wins when set)"),
    _m(_T, "max_steps", -1, "Trainer(max_steps=...), and max_epochs=-1 when above 0 (it overrides the epochs)"),
    _m(
        _T,
        "lr_scheduler_type",
        "linear",
        "the scheduler of configure_optimizers(): 'linear', 'constant', 'constant_with_warmup', 'cosine'; the "
        "other transformers schedules from transformers' get_scheduler (the metric-driven 'reduce_lr_on_plateau' "
        "and 'greedy' refused)",
    ),
    _m(
        _T,
        "lr_scheduler_kwargs",
        {},
        "the scheduler's arguments, given to transformers' get_scheduler(scheduler_specific_kwargs=...) as the "
        "Hugging Face Trainer gives them; checked at import",
    ),
    _m(_T, "warmup_ratio", 0.0, "scheduler warm-up: ceil(ratio * total steps)"),
    _m(_T, "warmup_steps", 0, "scheduler warm-up steps (wins over warmup_ratio)"),
    _i(_T, "log_level", "passive", "the verbosity of transformers' logger; Lightning logs through Python's logging"),
    _i(_T, "log_level_replica", "warning", "the verbosity of transformers' logger on other ranks"),
    _i(_T, "log_on_each_node", True, "the verbosity of transformers' logger on other nodes"),
    _m(_T, "logging_dir", None, "TensorBoardLogger(save_dir=...) when report_to names tensorboard"),
    _m(_T, "logging_strategy", "steps", "'steps': Trainer(log_every_n_steps=logging_steps); 'no': logger=False"),
    _r(_T, "logging_first_step", False, f"{_HF_LOOP}; {_NOT_YET}"),
    _m(_T, "logging_steps", 500, "Trainer(log_every_n_steps=...) (whole steps)"),
    _r(_T, "logging_nan_inf_filter", False, "Lightning logs the loss as computed; filter in your training_step"),
    _m(
        _T,
        "save_strategy",
        "steps",
        "'steps': ModelCheckpoint(every_n_train_steps=save_steps); 'epoch': every_n_epochs=1; 'no': "
        "Trainer(enable_checkpointing=False)",
    ),
    _m(_T, "save_steps", 500, "ModelCheckpoint(every_n_train_steps=...)"),
    _m(_T, "save_total_limit", None, "ModelCheckpoint(save_top_k=..., monitor='step', mode='max'): the newest kept"),
    _i(_T, "save_safetensors", True, "the format of Hugging Face checkpoint folders; Lightning writes .ckpt files"),
    _r(_T, "save_on_each_node", False, "Lightning saves on global rank 0 (or per rank with sharded strategies)"),
    _m(_T, "save_only_model", False, "ModelCheckpoint(save_weights_only=True)"),
    _i(
        _T,
        "restore_callback_states_from_checkpoint",
        False,
        "Lightning restores callback states whenever it resumes from a checkpoint",
    ),
    _r(_T, "no_cuda", False, "the importer converts HPU runs; for CPU use Trainer(accelerator='cpu')"),
    _r(_T, "use_cpu", False, "the importer converts HPU runs; for CPU use Trainer(accelerator='cpu')"),
    _r(_T, "use_mps_device", False, "the importer converts HPU runs"),
    _m(_T, "seed", 42, "seed (call lightning.seed_everything(result.seed))"),
    _r(_T, "data_seed", None, f"a separate sampler seed is {_NOT_YET}"),
    _r(_T, "jit_mode_eval", False, "TorchScript for CPU inference, not an HPU feature"),
    _r(_T, "use_ipex", False, "Intel Extension for PyTorch on CPUs, not an HPU feature"),
    _m(_T, "bf16", False, "precision 'bf16-mixed' (HPUPrecisionPlugin)"),
    _r(_T, "fp16", False, "optimum-habana refuses it too; use bf16"),
    _r(_T, "fp16_opt_level", "O1", "apex levels; HPU autocast has O1 only", _one_of("O1", None)),
    _r(
        _T,
        "half_precision_backend",
        "hpu_amp",
        "the importer converts HPU runs: HPU autocast",
        _one_of("hpu_amp", "auto", None),
    ),
    _r(_T, "bf16_full_eval", False, f"a separate evaluation precision is {_NOT_YET}"),
    _r(_T, "fp16_full_eval", False, "optimum-habana refuses it too"),
    _r(_T, "tf32", None, "optimum-habana refuses it too; TF32 is a CUDA setting"),
    _i(_T, "local_rank", -1, "set by the launcher; Lightning reads LOCAL_RANK itself"),
    _r(_T, "ddp_backend", None, "HPUs communicate over HCCL", _one_of(None, "hccl")),
    _r(_T, "tpu_num_cores", None, "TPUs only; optimum-habana refuses it too"),
    _r(_T, "tpu_metrics_debug", False, "TPUs only; optimum-habana refuses it too"),
    _r(_T, "debug", "", f"transformers' debug options are {_NOT_YET}"),
    _m(_T, "dataloader_drop_last", False, "dataloaders['train'|'eval']['drop_last']"),
    _m(
        _T,
        "eval_steps",
        None,
        "Trainer(val_check_interval=...) with eval_strategy 'steps' (logging_steps when unset)",
        "ratios of the total steps (below 1) are refused: give whole steps",
    ),
    _m(_T, "dataloader_num_workers", 0, "dataloaders['train'|'eval']['num_workers']"),
    _m(_T, "dataloader_prefetch_factor", None, "dataloaders['train'|'eval']['prefetch_factor']"),
    _r(_T, "past_index", -1, _HF_LOOP, _one_of(-1, None)),
    _i(_T, "run_name", None, "the run name of report_to integrations; name your Lightning logger"),
    _m(_T, "disable_tqdm", None, "Trainer(enable_progress_bar=not disable_tqdm)"),
    _i(_T, "remove_unused_columns", True, "column dropping of Hugging Face datasets; your collate function decides"),
    _r(_T, "label_names", None, "tells the Hugging Face loop which batch keys are labels; your training_step does"),
    _m(
        _T,
        "load_best_model_at_end",
        False,
        "a callback loads trainer.checkpoint_callback.best_model_path into the model when fit ends (monitoring "
        "eval_loss, min, without metric_for_best_model)",
        "needs save_strategy equal to eval_strategy, and save_steps a multiple of eval_steps, as transformers checks",
    ),
    _m(
        _T,
        "metric_for_best_model",
        None,
        "ModelCheckpoint(monitor=...): the name your module logs; checkpoints are then saved after each evaluation, "
        "ranked by its value",
    ),
    _m(_T, "greater_is_better", None, "ModelCheckpoint(mode='max' / 'min')"),
    _r(_T, "ignore_data_skip", False, _HF_LOOP),
    _m(
        _T,
        "fsdp",
        "",
        "strategy HPUFSDPStrategy(sharding_strategy=...): 'full_shard', 'shard_grad_op', 'hybrid_shard', "
        "'no_shard'; 'offload': cpu_offload=True; 'auto_wrap': auto_wrap_policy from fsdp_config",
        "eager mode only (HPUFSDPStrategy refuses lazy mode)",
    ),
    _m(
        _T,
        "fsdp_min_num_params",
        0,
        "with 'auto_wrap': HPUFSDPStrategy(auto_wrap_policy=WrapLargerThan(n)), accelerate's size-based wrap",
        "deprecated by optimum-habana for fsdp_config's min_num_params (the larger of the two counts)",
    ),
    _m(
        _T,
        "fsdp_config",
        None,
        "HPUFSDPStrategy arguments, with optimum-habana's defaults: transformer_layer_cls_to_wrap / min_num_params "
        "(with 'auto_wrap'), backward_prefetch ('NO_PREFETCH': backward_prefetch=None; 'BACKWARD_PRE'), "
        "forward_prefetch, sync_module_states (true), use_orig_params (true), activation_checkpointing (the wrapped "
        "units)",
        "a dict or a JSON file, 'fsdp_' prefixes dropped; other keys, the XLA keys, cpu_ram_efficient_loading and "
        "'BACKWARD_POST' refused",
    ),
    _m(
        _T,
        "fsdp_transformer_layer_cls_to_wrap",
        None,
        "with 'auto_wrap': HPUFSDPStrategy(auto_wrap_policy=WrapLayersNamed(names)); a 'Gaudi' prefix also matches "
        "transformers' class (GaudiLlamaDecoderLayer: LlamaDecoderLayer); none: the model's _no_split_modules",
        "deprecated by optimum-habana for fsdp_config's transformer_layer_cls_to_wrap (added to it)",
    ),
    _i(_T, "accelerator_config", None, "HF accelerate's data-loader wrapping; Lightning adds its own sampler"),
    _m(
        _T,
        "deepspeed",
        None,
        "strategy HPUDeepSpeedStrategy(config=...) (lightning_accel.deepspeed_hpu)",
        '"auto" values are filled from the training arguments (the model\'s hidden_size and the step count when the '
        "fit starts), as transformers' HfTrainerDeepSpeedConfig does; a given value that differs from its argument is "
        "refused; gradient_accumulation_steps goes to the Trainer",
    ),
    _r(_T, "label_smoothing_factor", 0.0, "computed in your loss: cross_entropy(..., label_smoothing=...)"),
    _m(
        _T,
        "optim",
        "adamw_torch",
        "the optimizer of configure_optimizers(): 'adamw_torch', 'adamw_torch_fused', 'adamw_hf' (AdamW), 'sgd'",
    ),
    _r(_T, "optim_args", None, f"optimizer arguments are {_NOT_YET}"),
    _r(_T, "adafactor", False, f"Adafactor is {_NOT_YET}"),
    _r(_T, "group_by_length", False, f"a length-grouped sampler is {_NOT_YET}"),
    _i(_T, "length_column_name", "length", "read only with group_by_length, which is refused"),
    _m(
        _T,
        "report_to",
        None,
        "'none': Trainer(logger=False); 'tensorboard': TensorBoardLogger; 'all' / unset: Lightning's default logger",
        "other integrations are refused: pass the Lightning logger to the Trainer yourself",
    ),
    _m(_T, "ddp_find_unused_parameters", False, "HPUParallelStrategy(find_unused_parameters=...)"),
    _m(_T, "ddp_bucket_cap_mb", 230, "HPUParallelStrategy(bucket_cap_mb=...)"),
    _m(_T, "ddp_broadcast_buffers", None, "HPUParallelStrategy(broadcast_buffers=...)"),
    _m(_T, "dataloader_pin_memory", True, "dataloaders['train'|'eval']['pin_memory']"),
    _m(_T, "dataloader_persistent_workers", False, "dataloaders['train'|'eval']['persistent_workers']"),
    _r(_T, "skip_memory_metrics", True, f"memory metrics are {_NOT_YET}", _one_of(True, None)),
    _r(_T, "use_legacy_prediction_loop", False, _EVAL_LOOP),
    _r(_T, "push_to_hub", False, "Lightning does not upload; call model.push_to_hub yourself"),
    _r(
        _T,
        "resume_from_checkpoint",
        None,
        "a Hugging Face checkpoint folder is no Lightning checkpoint: load its weights with from_pretrained(folder)",
    ),
    _i(_T, "hub_model_id", None, _HUB),
    _i(_T, "hub_strategy", "every_save", _HUB),
    _i(_T, "hub_token", None, _HUB),
    _i(_T, "hub_private_repo", None, _HUB),
    _i(_T, "hub_always_push", False, _HUB),
    _i(_T, "hub_revision", None, _HUB),
    _m(_T, "gradient_checkpointing", False, "prepare_model(model): model.gradient_checkpointing_enable(...)"),
    _m(_T, "gradient_checkpointing_kwargs", None, "prepare_model(model): gradient_checkpointing_enable(kwargs)"),
    _r(_T, "include_inputs_for_metrics", False, _EVAL_LOOP),
    _r(_T, "include_for_metrics", [], _EVAL_LOOP),
    _r(_T, "eval_do_concat_batches", True, _EVAL_LOOP, _one_of(True, None)),
    _r(_T, "fp16_backend", "auto", "optimum-habana refuses it too", _one_of("auto", None)),
    _i(_T, "push_to_hub_model_id", None, _HUB),
    _i(_T, "push_to_hub_organization", None, _HUB),
    _i(_T, "push_to_hub_token", None, _HUB),
    _r(_T, "mp_parameters", "", "SageMaker model parallelism; optimum-habana refuses it too"),
    _r(
        _T,
        "auto_find_batch_size",
        False,
        "its restart of the training loop with a smaller batch after an out-of-memory error has no Lightning "
        "equivalent: find the size before the run with Tuner(trainer).scale_batch_size(module), which recognises "
        "Gaudi's out-of-memory error, and set per_device_train_batch_size to it",
    ),
    _m(_T, "full_determinism", False, "Trainer(deterministic=True)"),
    _r(_T, "torchdynamo", None, "deprecated by transformers: use torch_compile"),
    _i(_T, "ray_scope", "last", "hyperparameter search with Ray Tune, not a training setting"),
    _m(_T, "ddp_timeout", 1800, "HPUParallelStrategy(timeout=timedelta(seconds=...))"),
    _m(_T, "torch_compile", False, "HPUCompile() and HPUCompileMetrics() callbacks"),
    _r(
        _T,
        "torch_compile_backend",
        None,
        "HPUCompile compiles with the SDK's hpu_backend",
        _one_of(None, "hpu_backend"),
    ),
    _r(_T, "torch_compile_mode", None, "hpu_backend takes no torch.compile mode; use HPUCompile(options=...)"),
    _m(
        _T,
        "include_tokens_per_second",
        False,
        "throughput_monitor(batch_size_fn, length_fn): Lightning's ThroughputMonitor, length_fn required",
    ),
    _r(_T, "include_num_input_tokens_seen", False, _NOT_YET),
    _r(_T, "neftune_noise_alpha", None, f"NEFTune embedding noise is {_NOT_YET}"),
    _r(_T, "optim_target_modules", None, f"GaLore optimizers are {_NOT_YET}"),
    _r(_T, "batch_eval_metrics", False, _EVAL_LOOP),
    _r(_T, "eval_on_start", False, f"{_HF_LOOP}; call trainer.validate before fit"),
    _r(_T, "use_liger_kernel", False, "Liger kernels are Triton (CUDA) kernels"),
    _r(_T, "liger_kernel_config", None, "Liger kernels are Triton (CUDA) kernels"),
    _r(_T, "eval_use_gather_object", False, _EVAL_LOOP),
    _i(
        _T,
        "average_tokens_across_devices",
        True,
        "the Hugging Face Trainer's loss normalisation; your training_step computes the loss",
    ),
    _i(_T, "use_habana", False, "the importer always targets HPUs: trainer_kwargs() has accelerator='hpu'"),
    _m(_T, "gaudi_config_name", None, "read as the gaudi_config when that is not given (a local file)"),
    _m(
        _T,
        "use_lazy_mode",
        True,
        "environment PT_HPU_LAZY_MODE=1 (True) or 0 (False), checked by trainer_kwargs()",
        "torch_compile needs eager mode (0)",
    ),
    _m(_T, "use_hpu_graphs", False, "HPUGraphs(stages=('validate', 'test', 'predict')) (deprecated alias)"),
    _m(_T, "use_hpu_graphs_for_inference", False, "HPUGraphs(stages=('validate', 'test', 'predict'))"),
    _m(_T, "use_hpu_graphs_for_training", False, "HPUGraphs(stages=(..., 'fit'))"),
    _m(_T, "use_compiled_autograd", False, "HPUCompile(compiled_autograd=True)"),
    _m(_T, "compile_from_sec_iteration", False, "HPUCompile(from_step=1)"),
    _m(_T, "compile_dynamic", None, "HPUCompile(dynamic=...)"),
    _m(
        _T,
        "use_zero3_leaf_promotion",
        False,
        "prepare_model(model): deepspeed.utils.set_z3_leaf_modules(model, [block]): LlamaDecoderLayer (llama), "
        "MixtralSparseMoeBlock (mixtral), Qwen3MoeSparseMoeBlock (qwen3_moe)",
        "needs a ZeRO-3 deepspeed config; another model type is refused (optimum-habana skips it silently)",
    ),
    _m(
        _T,
        "cache_size_limit",
        None,
        "DynamoSettings(cache_size_limit=...): set for the run, restored after; a function reaching it is reported",
        "read with torch_compile=True only, as optimum-habana does",
    ),
    _m(_T, "use_regional_compilation", False, "HPUCompile(regions=True)"),
    _m(
        _T,
        "inline_inbuilt_nn_modules",
        None,
        "DynamoSettings(inline_inbuilt_nn_modules=...): set for the run, restored after",
        "torch 2.13 retired the setting (it always inlines): there False warns that it cannot take effect",
    ),
    _m(
        _T,
        "allow_unspec_int_on_nn_module",
        None,
        "DynamoSettings(allow_unspec_int_on_nn_module=...): set for the run, restored after",
    ),
    _r(_T, "disable_tensor_cache_hpu_graphs", False, f"HPU graphs without the tensor cache are {_NOT_YET}"),
    _m(_T, "max_hpu_graphs", None, "HPUGraphs(max_graphs=...)"),
    _m(
        _T,
        "distribution_strategy",
        "ddp",
        "'ddp': HPUParallelStrategy; 'fast_ddp': HPUFastDDPStrategy(buffer_dtype=torch.bfloat16, "
        "use_hpu_graphs=use_lazy_mode and not use_hpu_graphs_for_training), no DDP wrapper, the gradients averaged "
        "in one fused all-reduce, packed and unpacked by two HPU graphs in lazy mode",
        "fast_ddp's buffer is bfloat16 and its HPU graphs on as optimum-habana's (whose trainer uses them whatever "
        "use_hpu_graphs_for_training says); off with use_lazy_mode=False or torch_compile, where graphs cannot be "
        "created, and beside use_hpu_graphs_for_training, whose training graphs they would double every gradient "
        "with on the emulator (HPUGraphs refuses that pair); the DDP-only fields (ddp_find_unused_parameters, "
        "ddp_bucket_cap_mb, ddp_broadcast_buffers) and fsdp / deepspeed are refused with it",
    ),
    _m(
        _T,
        "context_parallel_size",
        1,
        "HPUContextParallelStrategy(context_parallel_size=...): each group of that many ranks splits every sequence "
        "into contiguous slices and gathers the keys and values for attention; data parallel over the groups",
        "your training_step slices with trainer.strategy.context_parallel.split(input_ids) and returns "
        "context_parallel.loss(logits, labels); causal SDPA attention only (attn_implementation='sdpa'), no padding, "
        "sequence length a multiple of the size; refused with deepspeed, fsdp, fast_ddp or torch_compile; checked on "
        "the emulator",
    ),
    _m(
        _T,
        "minimize_memory",
        False,
        "prepare_model(model): minimize_memory=True on each fp8 transformer_engine.Linear (the fp8 weight is cast "
        "again in backward instead of kept from forward)",
        "needs fp8=True (refused without it); the emulator keeps no fp8 weight copies, so it saves no memory there",
    ),
    _m(
        _T,
        "throughput_warmup_steps",
        0,
        "ThroughputAfterWarmup(warmup_steps=throughput_warmup_steps * gradient_accumulation_steps, batch_size_fn, "
        "length_fn): train_samples_per_second (and tokens) without the warm-up batches",
        "needs trainer_kwargs(batch_size_fn=...); with adjust_throughput refused (the warm-up figure would count "
        "validation time); evaluation throughput is not reported",
    ),
    _m(
        _T,
        "adjust_throughput",
        False,
        "AdjustedThroughputMonitor(batch_size_fn, length_fn) instead of ThroughputMonitor: validation and "
        "checkpoint-saving time left out",
        "needs trainer_kwargs(batch_size_fn=...); logging time stays in",
    ),
    _m(
        _T,
        "pipelining_fwd_bwd",
        False,
        "PipelineForwardBackward(): a lazy-mode step mark between forward and backward",
        "lazy mode only: refused with use_lazy_mode=False or torch_compile=True (optimum-habana skips it silently)",
    ),
    _i(_T, "ignore_eos", True, "generation (predict_with_generate) only, not training"),
    _i(
        _T,
        "non_blocking_data_copy",
        False,
        "Lightning copies every batch to the HPU with non_blocking=True already (move_data_to_device), whatever the "
        "value",
    ),
    _m(_T, "profiling_warmup_steps", 0, "HPUProfiler(schedule=torch.profiler.schedule(warmup=...))"),
    _m(_T, "profiling_steps", 0, "HPUProfiler(schedule=torch.profiler.schedule(active=...)) when above 0"),
    _r(_T, "profiling_warmup_steps_eval", 0, f"profiling evaluation steps is {_NOT_YET}"),
    _r(_T, "profiling_steps_eval", 0, f"profiling evaluation steps is {_NOT_YET}"),
    _m(_T, "profiling_record_shapes", True, "HPUProfiler(record_shapes=...)"),
    _m(_T, "profiling_with_stack", False, "HPUProfiler(with_stack=...)"),
    _m(
        _T,
        "attn_implementation",
        "eager",
        "model_kwargs['attn_implementation'] ('eager', 'sdpa'); 'gaudi_fused_sdpa': 'sdpa' and "
        "prepare_model(model) applies use_fused_sdpa",
    ),
    _m(_T, "flash_attention_recompute", False, "use_fused_sdpa(recompute=...) (with gaudi_fused_sdpa)"),
    _m(_T, "flash_attention_fast_softmax", False, "use_fused_sdpa(softmax_mode='fast') (with gaudi_fused_sdpa)"),
    _m(_T, "flash_attention_causal_mask", False, "use_fused_sdpa(causal=True) (with gaudi_fused_sdpa)"),
    _m(
        _T,
        "flash_attention_fp8",
        False,
        "prepare_model(model) applies use_fp8_fused_attention: each attention layer gets the SDK's "
        "transformer_engine.FusedAttention, in fp8 inside precision 'fp8'",
        "needs fp8=True, attn_implementation='gaudi_fused_sdpa', flash_attention_causal_mask=True and "
        "flash_attention_recompute=False (the SDK trains fp8 attention causally and without recompute; optimum-habana "
        "does nothing with it without fp8); transformers causal LMs",
    ),
    _m(
        _T,
        "sdp_on_bf16",
        False,
        "SDPOnBF16(): torch._C._set_math_sdp_allow_fp16_bf16_reduction(True) for the run, restored after",
    ),
    _m(_T, "fp8", False, "precision 'fp8' (HPUPrecisionPlugin); prepare_model(model) replaces the Linear layers"),
)

FIELDS: dict[str, dict[str, Field]] = {
    "GaudiConfig": {f.name: f for f in GAUDI_CONFIG},
    "GaudiTrainingArguments": {f.name: f for f in TRAINING_ARGUMENTS},
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or " "


def markdown_table(source: Source) -> str:
    """The docs' table of ``source``'s fields: one row per field, in optimum-habana's order.

    Example:
        >>> print(markdown_table("GaudiConfig").splitlines()[0])
        | GaudiConfig field | default | lightning-accel | notes |
    """
    lines = [f"| {source} field | default | lightning-accel | notes |", "| --- | --- | --- | --- |"]
    for row in FIELDS[source].values():
        if row.action == "mapped":
            ours = row.target
        elif row.action == "refused":
            ours = "refused (other values than the default)"
        else:
            ours = "ignored"
        lines.append(f"| `{row.name}` | `{row.default!r}` | {_cell(ours)} | {_cell(row.reason)} |")
    return "\n".join(lines)


DOCS_START = "<!-- optimum-habana fields: generated by tools/optimum_table.py, do not edit -->"
DOCS_END = "<!-- end of generated optimum-habana fields -->"


def docs_block() -> str:
    """The generated part of ``docs/migration.md``: both tables between the markers."""
    return "\n\n".join([DOCS_START, markdown_table("GaudiConfig"), markdown_table("GaudiTrainingArguments"), DOCS_END])
