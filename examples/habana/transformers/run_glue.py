"""Sequence classification on Gaudi: optimum-habana's ``run_glue.py`` as a Lightning script.

Tiny, on the emulator (a 2-layer BERT built from a config in code, the character-level tokenizer, and the two-class
sentences of data/sentiment_*.csv):

    LIGHTNING_ACCEL_EMULATE=hpu python run_glue.py fit --config configs/glue_tiny.yaml --config configs/eager.yaml

On Gaudi with a real model: ``--config configs/glue_bert.yaml`` (bert-base-uncased, downloaded by transformers) and
the CSV files of a task (columns ``sentence`` and ``label``). The GLUE sets themselves come from the ``datasets``
library, which this recipe does not use: export a task to CSV first.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipes import RecipeModule, build_config, data_file, main, tokenizer_for


class SequenceClassifier(RecipeModule):
    """A transformers sequence classifier (``AutoModelForSequenceClassification``), by name or from ``model_type``.

    Args:
        model_name_or_path: A Hub name or a local folder (``bert-base-uncased``); ``None`` builds the model from
            ``model_type`` and ``config_overrides`` with random weights and the character-level tokenizer.
        model_type: The transformers model type to build when no name is given.
        config_overrides: ``"key=value,..."`` applied to that config.
        tokenizer_name: A tokenizer other than the model's.
        num_labels: Classes.
    """

    def __init__(
        self,
        model_name_or_path: str | None = None,
        model_type: str = "bert",
        config_overrides: str | None = None,
        tokenizer_name: str | None = None,
        num_labels: int = 2,
    ) -> None:
        super().__init__()
        from transformers import AutoModelForSequenceClassification

        self.tokenizer = tokenizer_for(model_name_or_path, tokenizer_name)
        if model_name_or_path:
            if config_overrides:
                raise ValueError(
                    f"config_overrides={config_overrides!r} with model_name_or_path={model_name_or_path!r}: the "
                    "overrides apply to a model built from model_type. Drop one."
                )
            self.model = AutoModelForSequenceClassification.from_pretrained(model_name_or_path, num_labels=num_labels)
        else:
            config = build_config(
                model_type,
                config_overrides,
                vocab_size=len(self.tokenizer),
                num_labels=num_labels,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            self.model = AutoModelForSequenceClassification.from_config(config)
        self.model.config.pad_token_id = self.tokenizer.pad_token_id

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> Any:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        return out.loss, out.logits

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        ids, mask, labels = batch
        loss, _ = self(input_ids=ids, attention_mask=mask, labels=labels)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        ids, mask, labels = batch
        loss, logits = self(input_ids=ids, attention_mask=mask, labels=labels)
        self.log("eval_loss", loss, sync_dist=True)
        self.log("eval_accuracy", (logits.argmax(dim=-1) == labels).float().mean(), sync_dist=True)


class SentenceData(LightningDataModule):
    """CSV files of ``sentence`` and ``label`` columns, tokenised and padded to ``max_seq_length`` (run_glue.py's).

    Args:
        train_file: A CSV file (default: data/sentiment_train.csv).
        validation_file: A CSV file (default: data/sentiment_validation.csv).
        max_seq_length: Tokens per sample: longer sentences are cut, shorter ones padded.
        pad_to_max_length: Pad every batch to ``max_seq_length`` (one shape: what HPU graphs and compiled graphs
            want). ``False`` is refused: this recipe pads statically, as run_glue.py does by default.
        max_train_samples: Keep at most this many training rows.
        max_eval_samples: Keep at most this many validation rows.
    """

    def __init__(
        self,
        train_file: str | None = None,
        validation_file: str | None = None,
        max_seq_length: int = 128,
        pad_to_max_length: bool = True,
        max_train_samples: int | None = None,
        max_eval_samples: int | None = None,
    ) -> None:
        super().__init__()
        if not pad_to_max_length:
            raise ValueError(
                "pad_to_max_length=False: this recipe pads every sample to max_seq_length (one input shape, so one "
                "graph). Accepted: True; lower max_seq_length for shorter inputs."
            )
        if max_seq_length < 2:
            raise ValueError(f"max_seq_length={max_seq_length!r}: accepted a whole number of tokens, at least 2.")
        self.train_file = data_file(train_file, "sentiment_train.csv", "train_file")
        self.validation_file = data_file(validation_file, "sentiment_validation.csv", "validation_file")
        self.max_seq_length = max_seq_length
        self.max_train, self.max_eval = max_train_samples, max_eval_samples
        self.tokenizer: Any = None  # the model's, set by the recipe CLI
        self.loader_kwargs: dict[str, dict[str, Any]] = {"train": {"batch_size": 8}, "eval": {"batch_size": 8}}

    def _rows(self, path: Path, limit: int | None) -> TensorDataset:
        with path.open(newline="", encoding="utf-8") as file:
            rows = list(csv.DictReader(file))
        if not rows or not {"sentence", "label"} <= set(rows[0]):
            raise ValueError(f"{path}: accepted a CSV with a header naming 'sentence' and 'label' columns.")
        rows = rows[:limit] if limit else rows
        ids = torch.full((len(rows), self.max_seq_length), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(rows):
            tokens = [*self.tokenizer.prefix, *self.tokenizer.encode(row["sentence"])][: self.max_seq_length]
            ids[i, : len(tokens)] = torch.tensor(tokens)
            mask[i, : len(tokens)] = 1
        labels = torch.tensor([int(row["label"]) for row in rows])
        return TensorDataset(ids, mask, labels)

    def setup(self, stage: str) -> None:
        self.train = self._rows(self.train_file, self.max_train)
        self.val = self._rows(self.validation_file, self.max_eval)

    def train_dataloader(self) -> DataLoader[Any]:
        generator = torch.Generator().manual_seed(0)
        return DataLoader(self.train, shuffle=True, generator=generator, **self.loader_kwargs["train"])

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val, **self.loader_kwargs["eval"])


if __name__ == "__main__":
    main(SequenceClassifier, SentenceData)
