"""HPUPrecisionPlugin: per-operator dtypes inside training_step, operator lists, opt levels and bad input."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUPrecisionPlugin


class DtypeProbe(LightningModule):
    """Records the dtype each operation produced inside training_step."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(16, 32)
        self.out = torch.nn.Linear(32, 4)
        self.dtypes: dict[str, set[torch.dtype]] = {}
        self.losses: list[float] = []

    def _seen(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        self.dtypes.setdefault(name, set()).add(tensor.dtype)
        return tensor

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        h = self._seen("linear", self.hidden(x))
        h = self._seen("relu", torch.relu(h))
        logits = self._seen("linear_out", self.out(h))
        probs = self._seen("softmax", torch.softmax(logits, dim=-1))
        loss = F.nll_loss(torch.log(probs), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=generator)
    y = (x[:, :4].argmax(dim=1)).long()
    return DataLoader(TensorDataset(x, y), batch_size=32)


def _fit(**trainer_kwargs: Any) -> DtypeProbe:
    torch.manual_seed(0)
    model = DtypeProbe()
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **trainer_kwargs,
    )
    trainer.fit(model, _loader())
    return model


@pytest.fixture
def op_lists(tmp_path: Path) -> tuple[Path, Path]:
    bf16 = tmp_path / "ops_bf16.txt"
    fp32 = tmp_path / "ops_fp32.txt"
    bf16.write_text("# lower precision\nlinear\n")
    fp32.write_text("softmax\n\n")
    return bf16, fp32


def test_operator_lists_set_dtypes_per_operator_and_loss_stays_close_to_fp32(op_lists: tuple[Path, Path]) -> None:
    bf16, fp32 = op_lists
    plugin = HPUPrecisionPlugin("bf16-mixed", opt_level="O1", bf16_file_path=bf16, fp32_file_path=fp32)
    mixed = _fit(plugins=[plugin])
    assert mixed.dtypes["linear"] == {torch.bfloat16}
    assert mixed.dtypes["linear_out"] == {torch.bfloat16}
    assert mixed.dtypes["relu"] == {torch.bfloat16}  # O1: unlisted, runs on its (bf16) input
    assert mixed.dtypes["softmax"] == {torch.float32}
    assert mixed.hidden.weight.dtype == torch.float32  # weights and optimizer steps stay in float32

    reference = _fit(precision="32-true")
    assert reference.dtypes["linear"] == {torch.float32}
    assert mixed.losses[-1] < mixed.losses[0]
    assert mixed.losses[-1] == pytest.approx(reference.losses[-1], rel=0.05, abs=0.02)


def test_precision_flag_selects_the_hpu_plugin_with_default_lists() -> None:
    model = _fit(precision="bf16-mixed")
    assert model.trainer.precision_plugin.__class__ is HPUPrecisionPlugin
    assert model.dtypes["linear"] == {torch.bfloat16}
    assert model.dtypes["softmax"] == {torch.float32}


def test_precision_16_maps_to_16_mixed_float16() -> None:
    plugin = HPUPrecisionPlugin(16)
    assert plugin.precision == "16-mixed"
    model = _fit(precision=16)
    assert model.dtypes["linear"] == {torch.float16}


def test_opt_level_o2_lowers_everything_but_the_fp32_list(op_lists: tuple[Path, Path]) -> None:
    _, fp32 = op_lists
    model = _fit(plugins=[HPUPrecisionPlugin("bf16-mixed", opt_level="O2", fp32_file_path=fp32)])
    assert model.dtypes["relu"] == {torch.bfloat16}
    assert model.dtypes["softmax"] == {torch.float32}


def test_bf16_true_keeps_bfloat16_weights() -> None:
    model = _fit(precision="bf16-true")
    assert model.hidden.weight.dtype == torch.bfloat16
    assert model.dtypes["softmax"] == {torch.bfloat16}


def test_optimizer_step_runs_without_casts(op_lists: tuple[Path, Path]) -> None:
    seen: list[torch.dtype] = []

    class Recording(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            loss = super().step(closure)
            weight = self.param_groups[0]["params"][0]
            seen.append(torch.nn.functional.linear(torch.ones(1, weight.shape[1]), weight).dtype)
            return loss

    class Model(DtypeProbe):
        def configure_optimizers(self) -> torch.optim.Optimizer:
            return Recording(self.parameters(), lr=0.1)

    bf16, _ = op_lists
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[HPUPrecisionPlugin("bf16-mixed", bf16_file_path=bf16)],
    )
    model = Model()
    trainer.fit(model, _loader())
    assert model.dtypes["linear"] == {torch.bfloat16}
    assert seen == [torch.float32, torch.float32]


def test_verbose_reports_cast_decisions(op_lists: tuple[Path, Path], caplog: pytest.LogCaptureFixture) -> None:
    bf16, fp32 = op_lists
    plugin = HPUPrecisionPlugin("bf16-mixed", verbose=True, bf16_file_path=bf16, fp32_file_path=fp32)
    with caplog.at_level(logging.INFO, logger="lightning_accel.habana.precision"):
        _fit(plugins=[plugin], max_steps=1)
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "linear runs in torch.bfloat16 (lower-precision list)" in messages
    assert "softmax runs in torch.float32 (fp32 list)" in messages


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("linear, relu\n", r"line 1: 'linear, relu' is not an operator name"),
        ("linear\nsoftmaxx\n", r"line 2: 'softmaxx' is not a known operator. Did you mean 'softmax'"),
    ],
)
def test_malformed_or_unknown_lists_are_clear_errors(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "ops.txt"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match=match):
        HPUPrecisionPlugin("bf16-mixed", bf16_file_path=path)


def test_missing_list_file_names_the_argument(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"fp32_file_path='.*nope.txt': no such file"):
        HPUPrecisionPlugin("bf16-mixed", fp32_file_path=tmp_path / "nope.txt")


def test_unreadable_list_file(tmp_path: Path) -> None:
    path = tmp_path / "binary.txt"
    path.write_bytes(b"\xff\xfe\x00linear")
    with pytest.raises(ConfigurationError, match=r"bf16_file_path=.* cannot be read"):
        HPUPrecisionPlugin("bf16-mixed", bf16_file_path=path)


def test_bad_arguments_are_clear_errors(op_lists: tuple[Path, Path], tmp_path: Path) -> None:
    bf16, _ = op_lists
    with pytest.raises(ConfigurationError, match=r"opt_level='O3' is not supported. Accepted: 'O1'"):
        HPUPrecisionPlugin("bf16-mixed", opt_level="O3")
    with pytest.raises(ConfigurationError, match=r"precision='64-true' is not supported on HPUs"):
        HPUPrecisionPlugin("64-true")
    with pytest.raises(ConfigurationError, match=r"need a mixed precision"):
        HPUPrecisionPlugin("32-true", bf16_file_path=bf16)
    both = tmp_path / "both.txt"
    both.write_text("linear\n")
    with pytest.raises(ConfigurationError, match=r"linear appear in both"):
        HPUPrecisionPlugin("bf16-mixed", bf16_file_path=bf16, fp32_file_path=both)
    with pytest.raises(ConfigurationError, match=r"precision='64-true' is not supported on HPUs"):
        Trainer(accelerator="hpu", devices=1, precision="64-true")
