"""``lightning-accel preflight`` on the examples' LightningCLI configs, as a user runs it from the example's folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lightning_accel.habana.preflight import Report

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "habana"


def test_cli_runs_on_the_digits_example_config(tmp_path: Path) -> None:
    # examples/habana/config.yaml is cli.py's: its model and data sections give init arguments, cli.py the classes.
    out = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "lightning_accel.core.cli", "preflight", "cli:DigitsMLP"]
    cmd += ["--datamodule", "cli:DigitsData", "--config", "config.yaml", "--modes", "lazy", "--steps", "2"]
    cmd += ["--strategies", "ddp,zero3", "--format", "json", "--output", str(out)]
    proc = subprocess.run(cmd, cwd=EXAMPLES, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr
    # What the config asks that the pre-flight run does not do is named, not dropped silently.
    assert "not used from config.yaml: trainer.accelerator, trainer.devices, " in proc.stderr
    assert "trainer.strategy, seed_everything." in proc.stderr
    report = Report.from_dict(json.loads(out.read_text()))
    assert report.modes["lazy"]["steps"] == 2
    assert not report.of_kind("not_run")
    # config.yaml's data.batch_size reached the data module: the measured micro-batch is 64.
    assert report.modes["lazy"]["memory"]["batch_size"] == 64
    ddp, zero3 = sorted(report.of_kind("memory"), key=lambda f: f.details["strategy"])
    assert ddp.details["strategy"] == "ddp" and zero3.details["strategy"] == "zero3"
    assert ddp.details["fits"] == {"Gaudi2": True, "Gaudi3": True}
