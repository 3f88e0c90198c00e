"""``lightning-accel preflight --device ipu package.module:Class``: the IPU report from the command line.

The models below are reached by the command as ``test_ipu_preflight_cli:<Class>`` (pytest puts this directory on
``sys.path``), as a user's ``my_project.model:Net`` would be.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.cli import main as cli_main
from lightning_accel.graphcore.preflight_cli import main as ipu_main


class Layers(LightningModule):
    def __init__(self, hidden: int = 16, depth: int = 4, unique: bool = False) -> None:
        super().__init__()
        self.unique = unique
        self.layers = torch.nn.ModuleList([torch.nn.Linear(hidden, hidden) for _ in range(depth)])
        self.data = TensorDataset(torch.randn(8, hidden), torch.randint(0, 3, (8,)))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, labels = batch
        for layer in self.layers:
            x = torch.relu(layer(x))
        loss = x.mean()
        if self.unique:
            loss = loss + torch.unique(labels).float().sum()  # HAZARD: unique
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-3)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=2)


class DictBatches(Layers):
    def train_dataloader(self) -> DataLoader:
        return DataLoader([{"x": torch.randn(4)}] * 4, batch_size=2)


class NoData(LightningModule):
    pass


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple:
    status = cli_main(["preflight", "--device", "ipu", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_clean_module_path_reports_its_memory_per_ipu(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "test_ipu_preflight_cli:Layers", "--init-args", "hidden=32", "--format", "json")
    assert status == 0
    report = json.loads(out)
    assert report["findings"] == [] and report["optimizer"] == "Adam"
    (ipu,) = report["memory"]
    weights = 4 * (32 * 32 + 32) * 4
    assert (ipu["weights"], ipu["optimizer"], ipu["capacity"], ipu["fits"]) == (
        weights,
        2 * weights,
        1472 * 624 * 1024,
        True,
    )


def test_a_refusal_and_a_split_in_the_terminal_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "test_ipu_preflight_cli:Layers", "--init-args", '{"unique": true}', "--ipus", "2")
    assert status == 1  # poptorch refuses the step
    assert "[dynamic_shape] aten::_unique2" in out
    assert "test_ipu_preflight_cli.py:" in out
    assert "[pipeline_split] model.layers over 2 IPUs: first blocks [0, " in out
    assert "fix:   poptorch.BeginBlock(model.layers[0], ipu_id=0); poptorch.BeginBlock(model.layers[" in out
    assert "Memory per IPU (MiB, estimated without Poplar" in out


def test_markdown_and_a_model_too_big_for_a_gc2(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(
        capsys, "test_ipu_preflight_cli:Layers", "--init-args", "hidden=2048", "depth=5", "--ipu-type", "gc2",
        "--format", "markdown",
    )  # fmt: skip
    assert status == 1
    assert out.startswith("# Pre-flight report for IPU (gc2, optimizer Adam): test_ipu_preflight_cli:Layers")
    assert "| memory | IPU 0 needs " in out and "Split it over 2 IPUs" in out
    assert "| 0 | - | 80.0 | 80.0 | 160.1 |" in out and "of 304.0 | NO |" in out


def test_the_core_chooses_the_emulated_device_and_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_accel.core.discovery import discovered_plugins
    from lightning_accel.core.emulation import reset_emulation_settings

    several = sum(1 for plugin in discovered_plugins() if plugin.spec.preflight) > 1
    assert cli_main(["preflight", "test_ipu_preflight_cli:Layers", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["memory"][0]["fits"] is True
    if not several:
        return  # only the graphcore plugin is installed here: nothing to choose
    assert "checking for ipu, the device LIGHTNING_ACCEL_EMULATE emulates (--device hpu for the other)" in captured.err
    emulate = os.environ["LIGHTNING_ACCEL_EMULATE"]
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "1")  # both emulated: the user must say which
    reset_emulation_settings()
    try:
        assert cli_main(["preflight", "test_ipu_preflight_cli:Layers"]) == 2
        assert "choose one with --device (hpu, ipu)" in capsys.readouterr().err
    finally:
        monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", emulate)
        reset_emulation_settings()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nowhere"], "target='nowhere': expected 'package.module:Class'"),
        (["no_such_module_here:Net"], "target='no_such_module_here:Net': cannot import 'no_such_module_here'"),
        (["test_ipu_preflight_cli:Missing"], "module 'test_ipu_preflight_cli' has no 'Missing'"),
        (["test_ipu_preflight_cli:_run"], "is <function _run"),
        (["test_ipu_preflight_cli:Layers", "--init-args", "width"], "--init-args 'width': not a JSON object nor key"),
        (["test_ipu_preflight_cli:Layers", "--init-args", "width=3"], "Layers(**{'width': 3}) failed"),
        (["test_ipu_preflight_cli:Layers", "--format", "html"], "--format 'html': accepted table, markdown, json"),
        (["test_ipu_preflight_cli:Layers", "--ipus", "9"], "ipus=9: model.layers has only 4 blocks"),
        (["test_ipu_preflight_cli:Layers", "--optimizer", "adagrad"], "optimizer='adagrad': accepted names are"),
        (["test_ipu_preflight_cli:Layers", "--ipu-type", "mk3"], "device='mk3': accepted IPUs are gc200, bow, gc2"),
        (["test_ipu_preflight_cli:NoData"], "NoData.train_dataloader() failed"),
        (["test_ipu_preflight_cli:DictBatches"], "is a dict: the IPU report passes a batch's tensors"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert ipu_main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("lightning-accel preflight: ")
    assert message in err
