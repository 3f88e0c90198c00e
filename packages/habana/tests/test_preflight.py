"""The pre-flight report for Gaudi: each hazard of a tiny model appears with its cause and its line.

The models are in ``_preflight_models.py``; each hazard's line there carries a ``# HAZARD: <name>`` marker, so the
expected locations follow the file. The CLI and the Python API run one process per mode.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import _preflight_models as models
import pytest
from lightning.pytorch import Trainer

from lightning_accel.habana.preflight import Finding, PreflightCallback, Report, preflight, render
from lightning_accel.habana.preflight.runner import parse_init_args

MODELS_FILE = Path(models.__file__)
TESTS_DIR = MODELS_FILE.parent


def _line(marker: str) -> str:
    """``_preflight_models.py:<line>`` of the line marked ``# HAZARD: <marker>``."""
    lines = MODELS_FILE.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if line.endswith(f"# HAZARD: {marker}"))
    return f"{MODELS_FILE.name}:{number}"


def _def_line(cls: type, method: str = "training_step") -> str:
    import inspect

    return f"{MODELS_FILE.name}:{inspect.getsourcelines(getattr(cls, method))[1]}"


def _ends_with(where: str, expected: str) -> bool:
    return where == expected or where.endswith("/" + expected)


def _cli(*args: str, cwd: Path = TESTS_DIR) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "lightning_accel.core.cli", "preflight", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=600)


def test_cli_bincount_loss_is_a_cpu_fallback_in_both_modes(tmp_path: Path) -> None:
    # bincount is not in the bridge's list of HPU kernels (hpu_kernels_1_19.txt): Gaudi runs it on the host.
    out = tmp_path / "report.json"
    proc = _cli("_preflight_models:BincountLoss", "--steps", "2", "--format", "json", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    report = Report.from_dict(json.loads(out.read_text()))
    assert set(report.modes) == {"lazy", "compile"}
    for mode in ("lazy", "compile"):
        (fallback,) = report.of_kind("cpu_fallback", mode)
        assert fallback.what == "aten::bincount"
        assert fallback.count == 2  # once per step
        assert _ends_with(fallback.where, _line("bincount"))
        assert "host CPU" in fallback.why and "one_hot(x, num_classes).sum(0)" in fallback.fix
    # hpu_backend cannot put a data-dependent output size in its graph: it breaks there.
    (graph_break,) = report.of_kind("graph_break", "compile")
    assert graph_break.what == "Dynamic shape operator"
    assert _ends_with(graph_break.where, _line("bincount"))
    assert "one_hot" in graph_break.fix
    assert not report.of_kind("not_run")


def test_cli_markdown_from_a_lightningcli_config(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "trainer:\n  accelerator: hpu\n  max_epochs: 5\n"
        "model:\n  class_path: _preflight_models.ItemInStep\n  init_args:\n    width: 8\n"
    )
    proc = _cli("--config", str(config), "--modes", "lazy", "--steps", "2", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    assert f"not used from {config}: trainer.accelerator, trainer.max_epochs." in proc.stderr
    assert proc.stdout.startswith("# Pre-flight report for Gaudi: `_preflight_models:ItemInStep`")
    assert "Run on the emulated HPU" in proc.stdout
    assert f"| Host synchronisation | lazy | `aten::_local_scalar_dense` | `{_line('item')}` | 2 |" in proc.stdout


def test_cli_refuses_bad_input_with_the_accepted_values(tmp_path: Path) -> None:
    proc = _cli("_preflight_models:NoSuchModel", "--modes", "lazy")
    assert proc.returncode == 2
    assert "target='_preflight_models:NoSuchModel': module '_preflight_models' has no 'NoSuchModel'." in proc.stderr
    proc = _cli("_preflight_models", "--modes", "lazy")
    assert proc.returncode == 2
    assert "target='_preflight_models': expected 'package.module:Class'" in proc.stderr
    proc = _cli("_preflight_models:Clean", "--format", "html")
    assert proc.returncode == 2
    assert "--format 'html': accepted table, markdown, json." in proc.stderr
    proc = _cli("_preflight_models:Clean", "--modes", "lazy,turbo")
    assert proc.returncode == 2
    assert "modes=['lazy', 'turbo']: accepted modes are lazy, compile (one or both)." in proc.stderr
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  width: 8\ndata:\n  batch_size: 4\n")
    proc = _cli("_preflight_models:Clean", "--config", str(config))
    assert proc.returncode == 2
    assert "the data section gives init arguments but no class: pass --datamodule" in proc.stderr
    config.write_text("model:\n  width: 8\n")
    proc = _cli("--config", str(config))
    assert proc.returncode == 2
    assert "no model given. Pass it as 'package.module:Class', or a --config" in proc.stderr
    proc = _cli("_preflight_models:Clean", "--init-args", "width")
    assert proc.returncode == 2
    assert "--init-args 'width': not a JSON object nor key=value." in proc.stderr


def test_cli_reports_a_mode_whose_run_failed_as_not_run() -> None:
    proc = _cli("_preflight_models:Clean", "--modes", "lazy", "--init-args", "depth=2", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    (finding,) = Report.from_dict(json.loads(proc.stdout)).findings
    assert finding.kind == "not_run" and finding.mode == "lazy"
    assert "Clean(**{'depth': 2}) failed" in finding.what


def test_cli_lazy_mode_runs_a_model_whose_module_asks_for_the_accelerator_when_imported() -> None:
    # transformers does, and torch keeps that first answer: the SDK must load before the model's module in lazy mode.
    proc = _cli(
        "_preflight_asks_accelerator:Clean",
        "--modes",
        "lazy",
        "--steps",
        "1",
        "--strategies",
        "none",
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    report = Report.from_dict(json.loads(proc.stdout))
    assert not report.of_kind("not_run"), report.findings


def test_api_dynamic_sequence_length_recompiles_in_both_modes() -> None:
    report = preflight(models.DynamicLength(), steps=3)
    (lazy,) = report.of_kind("recompilation", "lazy")
    assert report.modes["lazy"]["graphs compiled per step"][1:] == [1, 1]  # a new graph for each new length
    assert "step 2: [1, 5, 8]" in lazy.what and "step 3: [1, 7, 8]" in lazy.what
    assert _ends_with(lazy.where, _def_line(models.DynamicLength))
    assert "buckets" in lazy.fix
    (compiled,) = report.of_kind("recompilation", "compile")
    assert "size mismatch at index 1. expected 3, actual 5" in compiled.what
    assert _ends_with(compiled.where, _def_line(models.DynamicLength))


def test_api_item_in_the_step_is_a_host_sync_and_a_graph_break() -> None:
    report = preflight(models.ItemInStep(), steps=2)
    (sync,) = report.of_kind("host_sync", "lazy")
    assert sync.what == "aten::_local_scalar_dense"
    assert _ends_with(sync.where, _line("item"))
    assert sync.details["per_step"] == 1
    assert report.modes["lazy"]["host syncs per step"] == [1, 1]
    (graph_break,) = report.of_kind("graph_break", "compile")
    assert "Tensor.item()" in graph_break.what
    assert _ends_with(graph_break.where, _line("item"))


def test_api_int64_overflow_in_lazy_mode() -> None:
    report = preflight(models.Int64Overflow(), modes=("lazy",), steps=1)
    (hazard,) = report.of_kind("dtype", "lazy")
    assert hazard.what.startswith("aten::mul gives int64 values up to ")
    assert int(hazard.what.split("up to ")[1].split(",")[0]) > 2**31
    assert _ends_with(hazard.where, _line("overflow"))
    assert "int32" in hazard.why


def test_api_clean_model_has_no_findings() -> None:
    report = preflight(models.Clean(), modes=("lazy",), steps=2, strategies=())
    assert report.findings == []
    assert "No findings." in render(report, "table")


def test_api_refuses_what_it_cannot_run() -> None:
    with pytest.raises(TypeError, match=r"preflight\(model=Linear\): expected a LightningModule."):
        preflight(__import__("torch").nn.Linear(1, 1))
    with pytest.raises(ValueError, match=r"steps=0: must be a positive int"):
        preflight(models.Clean(), steps=0)
    model = models.Clean()
    model.hook = lambda: None  # not picklable: it cannot reach the mode's process
    with pytest.raises(ValueError, match=r"must be picklable to run in a process per mode"):
        preflight(model, modes=("lazy",))


def test_callback_in_a_users_trainer(eager_mode: None) -> None:
    callback = PreflightCallback()
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(models.BincountLoss())
    assert callback.report is not None
    (fallback,) = callback.report.of_kind("cpu_fallback", "eager")
    assert fallback.what == "aten::bincount" and fallback.count == 2
    assert _ends_with(fallback.where, _line("bincount"))
    with pytest.raises(ValueError, match=r"PreflightCallback\(mode='fast'\): not a mode. Accepted: lazy, compile"):
        PreflightCallback(mode="fast")


def test_callback_finds_float64_with_its_line(eager_mode: None) -> None:
    callback = PreflightCallback(mode="eager", max_steps=1)
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(models.Float64Loss())
    assert callback.report is not None and callback.report.steps == 1  # max_steps=1: the second step unwatched
    hazards = callback.report.of_kind("dtype", "eager")
    assert {h.what for h in hazards} >= {"aten::_to_copy computes in float64", "aten::_log_softmax computes in float64"}
    assert all(_ends_with(h.where, _line("float64")) for h in hazards if h.where)
    assert "computes float64 as float32" in hazards[0].why


def test_render_formats_and_init_args() -> None:
    report = Report("pkg:Net", 2, {"lazy": {"emulated": True, "steps": 2}})
    report.findings.append(Finding("host_sync", "lazy", "aten::_local_scalar_dense", "net.py:3", "w|hy", "fix"))
    assert json.loads(render(report, "json"))["findings"][0]["where"] == "net.py:3"
    assert "| `net.py:3` | 1 | w\\|hy | fix |" in render(report, "markdown")
    assert "Host synchronisation | lazy" in render(report, "table")
    with pytest.raises(ValueError, match=r"format='csv' is not a report format. Accepted: table, markdown, json."):
        render(report, "csv")
    assert parse_init_args(['{"width": 8}', "name=x", "depth=2"]) == {"width": 8, "name": "x", "depth": 2}


def test_core_cli_hands_preflight_to_the_plugin_that_offers_it(capsys: pytest.CaptureFixture[str]) -> None:
    from lightning_accel.core.cli import main

    assert main(["preflight", "--device", "gpu", "_preflight_models:Clean"]) == 2
    # hpu, and ipu where the graphcore plugin is installed beside (not in the Gaudi test environment).
    assert re.search(r"--device 'gpu' has no pre-flight check\. Accepted: hpu(, ipu)?\.", capsys.readouterr().err)
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "preflight" in capsys.readouterr().out


def test_the_modes_run_side_by_side(tmp_path: Path) -> None:
    # Each mode's run waits until the other mode's has started: one after the other, the first would give up.
    model = models.MeetsTheOtherMode(str(tmp_path), wait=120.0)
    report = preflight(model, modes=("lazy", "compile"), steps=1, strategies=())
    assert not report.of_kind("not_run"), [f.what for f in report.of_kind("not_run")]
    assert set(report.modes) == {"lazy", "compile"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compile", "lazy"]
