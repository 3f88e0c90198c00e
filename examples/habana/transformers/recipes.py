"""What ``run_clm.py`` and ``run_glue.py`` share: optimum-habana's option names, the tokenizer, the CLI.

The options keep the names of optimum-habana's ``run_clm.py`` / ``run_glue.py`` (``ModelArguments``,
``DataTrainingArguments`` and ``GaudiTrainingArguments``): ``--model.model_name_or_path``, ``--data.block_size``,
``--training.per_device_train_batch_size``, ``--training.use_lazy_mode``, ... The ``--training.*`` options are not
interpreted here: they go, with ``--optimum.gaudi_config`` / ``--optimum.training_args``, to
:func:`lightning_accel.habana.optimum.import_optimum_habana`, which turns them into the Trainer's arguments (strategy,
precision, HPUCompile, HPUGraphs, ...) and the optimizer, or refuses them with the reason.

Without ``model_name_or_path`` a model is built from ``model_type`` and ``config_overrides`` (as run_clm.py trains
from scratch) and the tokenizer is a character-level one built from the training file: nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import json
import os
import string
import time
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule, seed_everything
from lightning.pytorch.cli import LightningArgumentParser

from lightning_accel.habana.optimum import OptimumHabanaCLI, OptimumImport, read_fields

if os.environ.get("PT_HPU_LAZY_MODE") == "1":
    # In lazy mode the Gaudi SDK loads at this import, not at `import torch`. transformers asks torch for its
    # accelerator when it is imported, and torch keeps the first answer for the process: imported before the SDK, it
    # would find no HPU, and the backward pass fails with "Cannot access accelerator device when none is available".
    import habana_frameworks.torch.core  # noqa: F401

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


@dataclasses.dataclass
class TrainingArguments:
    """The ``GaudiTrainingArguments`` fields the recipes expose as ``--training.*``, with optimum-habana's defaults.

    Two defaults differ, for short runs: ``save_strategy="no"`` (optimum-habana: ``"steps"``) and
    ``logging_steps=1`` (500). Every other field of ``GaudiTrainingArguments`` can be given in a JSON file through
    ``--optimum.training_args``; a ``--training.*`` option given on the command line or in a config wins over it.
    """

    output_dir: str | None = None
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 8
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    num_train_epochs: float = 3.0
    max_steps: int = -1
    warmup_steps: int = 0
    lr_scheduler_type: str = "linear"
    gradient_accumulation_steps: int = 1
    max_grad_norm: float = 1.0
    seed: int = 42
    bf16: bool = False
    fp8: bool = False
    attn_implementation: str = "eager"
    flash_attention_recompute: bool = False
    flash_attention_causal_mask: bool = False
    flash_attention_fp8: bool = False
    use_lazy_mode: bool = True
    use_hpu_graphs_for_training: bool = False
    torch_compile: bool = False
    torch_compile_backend: str | None = None
    use_regional_compilation: bool = False
    compile_from_sec_iteration: bool = False
    gaudi_config_name: str | None = None
    deepspeed: str | None = None
    fsdp: str = ""
    eval_strategy: str = "no"
    save_strategy: str = "no"
    logging_steps: int = 1


class CharTokenizer:
    """A character-level tokenizer: for the tiny runs, where no hub tokenizer is downloaded.

    Id 0 pads, id 1 stands for a character outside ``chars`` (by default the printable ASCII characters), id 2
    starts a sequence to classify (``prefix``, as BERT's ``[CLS]``: its classifier reads the first position).

    Example:
        >>> tokenizer = CharTokenizer("abc")
        >>> tokenizer.encode("cab")
        [5, 3, 4]
    """

    pad_token_id = 0
    prefix = (2,)

    def __init__(self, chars: str = string.printable) -> None:
        self.chars = sorted(set(chars))
        self.ids = {c: i + 3 for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars) + 3

    def encode(self, text: str) -> list[int]:
        return [self.ids.get(c, 1) for c in text]


class HubTokenizer:
    """The model's own tokenizer (``AutoTokenizer``) behind ``CharTokenizer``'s ``encode`` and ``pad_token_id``."""

    prefix = ()  # its encode adds the model's own special tokens

    def __init__(self, name: str) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(name)
        if self.tokenizer.pad_token_id is None:  # GPT-2 has none: pad with its end-of-text token
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.pad_token_id = int(self.tokenizer.pad_token_id)

    def __len__(self) -> int:
        return len(self.tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])


def tokenizer_for(model_name_or_path: str | None, tokenizer_name: str | None) -> Any:
    """The hub tokenizer when a model or tokenizer is named, else the character-level one."""
    name = tokenizer_name or model_name_or_path
    return HubTokenizer(name) if name else CharTokenizer()


def data_file(path: str | None, default: str, argument: str) -> Path:
    """``path`` (relative to the working directory, then to this folder), or the shipped ``default``."""
    if path is None:
        return DATA / default
    for candidate in (Path(path), HERE / path):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{argument}={path!r}: no such file (looked in the working directory and in {HERE}). Accepted: the path of "
        f"a text file (run_clm) or a CSV with 'sentence' and 'label' columns (run_glue); without it the recipe uses "
        f"data/{default}."
    )


def build_config(model_type: str, config_overrides: str | None, **fixed: Any) -> Any:
    """A model config from ``model_type`` and ``config_overrides`` (``"n_layer=2,n_embd=64"``), as run_clm.py does."""
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise ValueError(
            f"model_type={model_type!r} is not a transformers model type. Accepted: for example 'gpt2', 'llama', "
            "'bert', 'roberta' (transformers' CONFIG_MAPPING), or give model_name_or_path."
        )
    config = CONFIG_MAPPING[model_type]()
    if config_overrides:
        config.update_from_string(config_overrides)
    for key, value in fixed.items():
        setattr(config, key, value)
    return config


class RecipeModule(LightningModule):
    """What both recipes' modules share: the optimizer from the import, FSDP2 sharding, the recorded losses."""

    optimum: OptimumImport | None = None

    def __init__(self) -> None:
        super().__init__()
        self.model: Any = None
        self.tokenizer: Any = None
        self.losses: list[float] = []
        # Wall time of each training batch (forward, backward, optimizer step; the loss read back ends it).
        self.step_times: list[float] = []
        self._started = 0.0

    def configure_model(self) -> None:
        # FSDP2 under strategy="hpu_model_parallel": each transformer block a shard unit, then the whole model.
        mesh = self.device_mesh
        if mesh is None or "data_parallel" not in (mesh.mesh_dim_names or ()):
            return
        data_parallel = mesh["data_parallel"]
        if data_parallel.size() <= 1:
            return
        from torch.distributed.fsdp import fully_shard

        from lightning_accel.habana.compilation import repeated_blocks

        for block in repeated_blocks(self.model):
            fully_shard(block, mesh=data_parallel)
        fully_shard(self.model, mesh=data_parallel)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.losses.append(float(loss.detach().float().cpu()))
        self.step_times.append(time.perf_counter() - self._started)

    def configure_optimizers(self) -> Any:
        if self.optimum is None:
            raise RuntimeError(
                f"{type(self).__name__} takes its optimizer from the recipe CLI's import of the training arguments: "
                "run it through run_clm.py / run_glue.py, or set module.optimum = import_optimum_habana(...) first."
            )
        optimizers = self.optimum.configure_optimizers(self)
        # The importer lists a weight shared by two modules (GPT-2's tied input and output embeddings) once per
        # module: AdamW would then update it twice per step, and DeepSpeed refuses it. Keep its first place only,
        # until the importer does so itself (reported in issue 46).
        seen: set[int] = set()
        for group in optimizers["optimizer"].param_groups:
            kept = []
            for parameter in group["params"]:
                if id(parameter) not in seen:
                    seen.add(id(parameter))
                    kept.append(parameter)
            group["params"] = kept
        return optimizers


class RecipeCLI(OptimumHabanaCLI):
    """``OptimumHabanaCLI`` plus ``--training.*``: optimum-habana's training arguments as options of their own.

    After ``fit`` it prints one ``RESULT {...}`` JSON line (accelerator, strategy, precision, optimizer, callbacks,
    execution mode, losses and step times, the last metrics), which the tests and the benchmark read.
    """

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_class_arguments(TrainingArguments, "training")

    def _training(self) -> dict[str, Any]:
        config = self.config[self.subcommand] if self.subcommand else self.config
        given = config.get("training")
        return dict(vars(given)) if given is not None and not isinstance(given, dict) else dict(given or {})

    def before_instantiate_classes(self) -> None:
        # optimum-habana seeds before it builds the model (set_seed(training_args.seed)): the same here.
        seed_everything(int(self._training().get("seed", 42)), workers=True)

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        config = self.config[self.subcommand] if self.subcommand else self.config
        optimum = config.get("optimum")
        recipe_defaults = dataclasses.asdict(TrainingArguments())
        merged = dict(recipe_defaults)
        merged.update(read_fields(optimum.get("training_args") if optimum else None, "--optimum.training_args"))
        merged.update({k: v for k, v in self._training().items() if v != recipe_defaults.get(k)})
        # The import reads a dict as well as a file: the merged arguments go to OptimumHabanaCLI as one.
        config["optimum.training_args"] = merged
        trainer = super().instantiate_trainer(**kwargs)
        assert self.optimum is not None
        self.model.optimum = self.optimum
        self.datamodule.tokenizer = self.model.tokenizer
        self.datamodule.loader_kwargs = {
            "train": self.optimum.dataloader_kwargs("train"),
            "eval": self.optimum.dataloader_kwargs("eval"),
        }
        # The model was built before the import: it takes the import's attention now ("sdpa" for gaudi_fused_sdpa).
        attention = self.optimum.model_kwargs.get("attn_implementation")
        if attention and attention != self.model.model.config._attn_implementation:
            self.model.model.set_attn_implementation(attention)
        if self.optimum.model_setup:
            self.optimum.prepare_model(self.model.model)
        return trainer

    def after_fit(self) -> None:
        trainer = self.trainer
        if not trainer.is_global_zero:
            return
        from lightning_accel.habana import sdk

        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        result = {
            "accelerator": type(trainer.accelerator).__name__,
            "strategy": type(trainer.strategy).__name__,
            "callbacks": sorted({type(cb).__name__ for cb in trainer.callbacks}),
            "precision": str(getattr(trainer.precision_plugin, "precision", "")),
            "optimizer": type(trainer.optimizers[0]).__name__ if trainer.optimizers else None,
            "lazy": bool(sdk.htcore.is_lazy()),
            "attention": self.model.model.config._attn_implementation,
            # The units FSDP sharded the model into (none under other strategies).
            "fsdp_units": sum(type(m).__name__ == "FullyShardedDataParallel" for m in trainer.strategy.model.modules()),
            "steps": trainer.global_step,
            "losses": self.model.losses,
            "step_times": self.model.step_times,
            "metrics": metrics,
        }
        print("RESULT " + json.dumps(result), flush=True)


def main(module: type[LightningModule], data: type[Any], args: list[str] | None = None) -> RecipeCLI:
    """Run a recipe's CLI (``args``: instead of ``sys.argv``)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return RecipeCLI(module, data, args=args, save_config_callback=None)
