"""The IPU part of the pre-flight report: each refusal of poptorch 3.4 and each narrowing, with its line.

Each hazard's line carries a ``# HAZARD: <name>`` marker, so the expected locations follow this file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch import LightningModule

from lightning_accel.graphcore.preflight import ipu_preflight

THIS = Path(__file__)


def _line(marker: str) -> str:
    lines = THIS.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if line.endswith(f"# HAZARD: {marker}"))
    return f"{THIS.name}:{number}"


class UniqueCount(torch.nn.Module):
    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        return torch.unique(labels).float().sum()  # HAZARD: unique


class HuberStep(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.huber_loss(self.layer(x).squeeze(-1), y)  # HAZARD: huber
        self.log("loss", loss)
        return loss


class MaskedLogits(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.layer(x)
        keep = logits[:, 0] > 0
        return logits[keep].sum()  # HAZARD: mask


class BincountLoss(torch.nn.Module):
    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        return torch.bincount(labels).float().mean()  # HAZARD: bincount


class HashedIds(torch.nn.Module):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hashed = ids * 1_000_003  # HAZARD: overflow
        return (hashed % 7).float().sum()


def _only(findings: list, kind: str) -> object:
    (finding,) = [f for f in findings if f.kind == kind]
    return finding


def test_unique_is_a_data_dependent_shape_with_its_line() -> None:
    finding = _only(ipu_preflight(UniqueCount(), torch.tensor([3, 1, 3, 2])), "dynamic_shape")
    assert finding.what.startswith("aten::_unique2")
    assert finding.where.endswith(_line("unique"))
    assert "static shapes" in finding.why and "one_hot" in finding.fix
    assert "Type inference failed for aten::_unique2" in finding.details["poptorch"]


def test_a_loss_without_lowering_in_a_training_step() -> None:
    findings = ipu_preflight(HuberStep(), torch.randn(8, 4), torch.randn(8))
    finding = _only(findings, "loss")
    assert finding.what == "aten::huber_loss"
    assert finding.where.endswith(_line("huber"))
    assert "smooth_l1_loss" in finding.fix and "identity_loss" in finding.fix


def test_boolean_mask_indexing() -> None:
    finding = _only(ipu_preflight(MaskedLogits(), torch.randn(8, 4)), "dynamic_shape")
    assert finding.what == "aten::index with a boolean mask"
    assert finding.where.endswith(_line("mask"))
    assert "torch.where" in finding.fix


def test_bincount_without_minlength() -> None:
    finding = _only(ipu_preflight(BincountLoss(), torch.tensor([0, 2, 2])), "dynamic_shape")
    assert finding.what == "aten::bincount"
    assert finding.where.endswith(_line("bincount"))
    assert "minlength" in finding.fix


def test_int64_values_beyond_int32_are_narrowing_findings() -> None:
    findings = ipu_preflight(HashedIds(), torch.tensor([5_000, 3_000_000]))
    finding = _only(findings, "narrowing")
    assert finding.what.startswith("aten::mul gives int64 values up to 3000009000000, beyond int32")
    assert finding.where.endswith(_line("overflow"))
    assert "wrap" in finding.why


def test_a_clean_model_has_no_findings_and_bad_input_is_refused() -> None:
    assert ipu_preflight(torch.nn.Linear(4, 2), torch.randn(3, 4)) == []
    with pytest.raises(TypeError, match=r"ipu_preflight\(model=function\): expected a torch.nn.Module"):
        ipu_preflight(lambda x: x, torch.randn(1))  # type: ignore[arg-type]
