"""Causal language-model fine-tuning on Gaudi: optimum-habana's ``run_clm.py`` as a Lightning script.

Tiny, on the emulator (a 2-layer GPT-2 built from a config in code, a character-level tokenizer, data/corpus.txt):

    LIGHTNING_ACCEL_EMULATE=hpu python run_clm.py fit --config configs/clm_tiny.yaml --config configs/eager.yaml

On Gaudi with a real model (downloaded from the Hub by transformers):

    PT_HPU_LAZY_MODE=1 python run_clm.py fit --config configs/clm_gpt2.yaml --config configs/lazy.yaml

The variants (configs/lazy.yaml, eager.yaml, compile.yaml, hpu_graphs.yaml, deepspeed_zero3.yaml, fsdp2.yaml,
fp8.yaml) set only ``--training.*`` (optimum-habana's training arguments) and the Trainer's devices; README.md lists
them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipes import RecipeModule, build_config, data_file, main, tokenizer_for


class CausalLM(RecipeModule):
    """A transformers causal LM (``AutoModelForCausalLM``), loaded by name or built from ``model_type``.

    Args:
        model_name_or_path: A Hub name or a local folder (``gpt2``); ``None`` builds the model from ``model_type``
            and ``config_overrides`` with random weights and the character-level tokenizer.
        model_type: The transformers model type to build when no name is given.
        config_overrides: ``"key=value,..."`` applied to that config (run_clm.py's option).
        tokenizer_name: A tokenizer other than the model's.
        use_cache: The model's KV cache (``HPUCompile`` with regions turns it off for training, and says so).
    """

    def __init__(
        self,
        model_name_or_path: str | None = None,
        model_type: str = "gpt2",
        config_overrides: str | None = None,
        tokenizer_name: str | None = None,
        use_cache: bool = True,
    ) -> None:
        super().__init__()
        from transformers import AutoModelForCausalLM

        self.tokenizer = tokenizer_for(model_name_or_path, tokenizer_name)
        if model_name_or_path:
            if config_overrides:
                raise ValueError(
                    f"config_overrides={config_overrides!r} with model_name_or_path={model_name_or_path!r}: the "
                    "overrides apply to a model built from model_type (run_clm.py refuses the pair too). Drop one."
                )
            self.model = AutoModelForCausalLM.from_pretrained(model_name_or_path, use_cache=use_cache)
        else:
            config = build_config(model_type, config_overrides, vocab_size=len(self.tokenizer), use_cache=use_cache)
            self.model = AutoModelForCausalLM.from_config(config)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, labels=labels).loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (ids,) = batch
        loss = self(input_ids=ids, labels=ids)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (ids,) = batch
        loss = self(input_ids=ids, labels=ids)
        self.log("eval_loss", loss, sync_dist=True)
        self.log("perplexity", torch.exp(loss), sync_dist=True)


class TextData(LightningDataModule):
    """A text file tokenised, concatenated and cut into blocks of ``block_size`` tokens (run_clm.py's group_texts).

    Args:
        train_file: A text file (default: data/corpus.txt).
        validation_file: A text file; without it the last ``validation_split_percentage`` % of the blocks.
        block_size: Tokens per sample.
        validation_split_percentage: The share of the training blocks held out without ``validation_file``.
        max_train_samples: Keep at most this many training blocks.
        max_eval_samples: Keep at most this many validation blocks.
        keep_linebreaks: Keep the line breaks of the text.
    """

    def __init__(
        self,
        train_file: str | None = None,
        validation_file: str | None = None,
        block_size: int = 64,
        validation_split_percentage: int = 5,
        max_train_samples: int | None = None,
        max_eval_samples: int | None = None,
        keep_linebreaks: bool = True,
    ) -> None:
        super().__init__()
        if block_size < 2:
            raise ValueError(f"block_size={block_size!r}: accepted a whole number of tokens, at least 2.")
        if not 0 <= validation_split_percentage < 100:
            raise ValueError(f"validation_split_percentage={validation_split_percentage!r}: accepted 0 to 99.")
        self.train_file = data_file(train_file, "corpus.txt", "train_file")
        self.validation_file = None if validation_file is None else data_file(validation_file, "", "validation_file")
        self.block_size = block_size
        self.split = validation_split_percentage
        self.max_train, self.max_eval = max_train_samples, max_eval_samples
        self.keep_linebreaks = keep_linebreaks
        self.tokenizer: Any = None  # the model's, set by the recipe CLI
        self.loader_kwargs: dict[str, dict[str, Any]] = {"train": {"batch_size": 8}, "eval": {"batch_size": 8}}

    def _blocks(self, path: Path) -> torch.Tensor:
        text = path.read_text(encoding="utf-8")
        if not self.keep_linebreaks:
            text = " ".join(text.splitlines())
        ids = torch.tensor(self.tokenizer.encode(text), dtype=torch.long)
        count = len(ids) // self.block_size
        if count == 0:
            raise ValueError(
                f"{path} holds {len(ids)} tokens, fewer than block_size={self.block_size}: give a longer file or a "
                "smaller block_size."
            )
        return ids[: count * self.block_size].view(count, self.block_size)

    def setup(self, stage: str) -> None:
        train = self._blocks(self.train_file)
        if self.validation_file is not None:
            val = self._blocks(self.validation_file)
        else:
            held = max(1, len(train) * self.split // 100) if self.split else 0
            train, val = train[: len(train) - held], train[len(train) - held :]
        self.train = train[: self.max_train] if self.max_train else train
        self.val = val[: self.max_eval] if self.max_eval else val

    def train_dataloader(self) -> DataLoader[Any]:
        generator = torch.Generator().manual_seed(0)
        return DataLoader(TensorDataset(self.train), shuffle=True, generator=generator, **self.loader_kwargs["train"])

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(TensorDataset(self.val), **self.loader_kwargs["eval"])


if __name__ == "__main__":
    main(CausalLM, TextData)
