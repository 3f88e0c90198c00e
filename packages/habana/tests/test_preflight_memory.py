"""The pre-flight report's device memory per rank, against the emulator's measured peak in real multi-rank runs.

The report predicts from one emulated HPU's step; this module also runs, as a script, the same model under DDP and
under FSDP2 (``fully_shard`` per block, then the whole body) on two emulated HPUs in real processes, and each rank
reads the peak of its second step (``torch.hpu.max_memory_allocated``, the emulator's exact accounting).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from _memory_model import BATCH, PeakOfSecondStep, ShardedTinyLM, TinyLM
from lightning.pytorch import Trainer

TOLERANCE = 0.10


def _measure(setup: str, out: str) -> None:
    from lightning_accel.habana import HPUModelParallelStrategy

    strategy: Any = "hpu_parallel"
    if setup == "fsdp":
        strategy = HPUModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    peak = PeakOfSecondStep()
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy=strategy,
        max_steps=2,
        callbacks=[peak],
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(ShardedTinyLM() if setup == "fsdp" else TinyLM())
    Path(out, f"rank{trainer.global_rank}.json").write_text(json.dumps({"peak": peak.peak}))


def _measured_peaks(setup: str, tmp_path: Path) -> list[int]:
    from _habana_helpers import script_env

    out = tmp_path / setup
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, __file__, setup, str(out)],
        cwd=Path(__file__).parent,
        env=script_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((out / f"rank{rank}.json").read_text())["peak"] for rank in (0, 1)]


if __name__ == "__main__":
    _measure(sys.argv[1], sys.argv[2])
    sys.exit(0)


import pytest  # noqa: E402  # not needed by the script's ranks

from lightning_accel.habana.preflight import DEVICES, MemoryProfile, Report, largest_batch, predict, preflight  # noqa: E402


@pytest.fixture(scope="module")
def report() -> Report:
    return preflight(TinyLM(), modes=("lazy",), steps=2, strategies=("ddp", "fsdp", "zero3"), world_size=2, tp_size=1)


@pytest.mark.parametrize("setup", ["ddp", "fsdp"])
def test_prediction_within_10_percent_of_the_measured_peak_per_rank(report: Report, setup: str, tmp_path: Path) -> None:
    (finding,) = [f for f in report.of_kind("memory", "lazy") if f.details["strategy"] == setup]
    assert finding.details["world_size"] == 2 and finding.details["batch_size"] == BATCH
    predicted = finding.details["bytes_per_rank"]
    for rank, measured in enumerate(_measured_peaks(setup, tmp_path)):
        assert abs(predicted - measured) <= TOLERANCE * measured, (setup, rank, predicted, measured)


def test_a_batch_that_does_not_fit_a_gaudi2_under_ddp_but_fits_under_zero3(report: Report) -> None:
    profile = MemoryProfile.from_dict(report.modes["lazy"]["memory"])
    gaudi2 = DEVICES["Gaudi2"]
    # 1 MiB gradient buckets: DeepSpeed's default of 2e8 elements (800 MB) is more than this small model's states.
    zero = {"zero_optimization": {"stage": 3, "reduce_bucket_size": 2**18}}
    batch = largest_batch(profile, "ddp", 8, gaudi2) + 1
    assert predict(profile, "ddp", 8, batch) > gaudi2 >= predict(profile, "zero3", 8, batch, deepspeed_config=zero)
    again = Report.from_dict(report.as_dict())
    again.findings = []
    from lightning_accel.habana.preflight.memory import add_memory_findings

    add_memory_findings(again, ("ddp", "zero3"), world_size=8, batch_size=batch, deepspeed_config=zero)
    ddp, zero3 = again.of_kind("memory")
    assert (
        ddp.what.startswith("DDP on 8 HPUs: ") and f"per rank at micro-batch {batch}: does NOT fit Gaudi2" in ddp.what
    )
    assert "gradient accumulation" in ddp.fix
    assert zero3.what.startswith("ZeRO-3 on 8 HPUs: ") and f"micro-batch {batch}: fits Gaudi2 (96.00 GiB)" in zero3.what
    assert zero3.details["largest_batch"]["Gaudi2"] >= batch > ddp.details["largest_batch"]["Gaudi2"]


def test_memory_options_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match=r"strategies=\['zero4'\]: accepted strategies are ddp, fsdp, fsdp2_tp"):
        preflight(TinyLM(), strategies=("zero4",))
    with pytest.raises(ValueError, match=r"tp_size=3: must be a positive int dividing world_size=8."):
        preflight(TinyLM(), tp_size=3)
    with pytest.raises(ValueError, match=r"batch_size=0: must be a positive int"):
        preflight(TinyLM(), batch_size=0)


def test_the_runs_deepspeed_config_file_sizes_the_zero_rows(tmp_path: Path) -> None:
    # The run's own ds_config.json, as HPUDeepSpeedStrategy(config=...) takes it: 1 MiB buckets, no overlap.
    zero = {"stage": 2, "reduce_bucket_size": 2**18, "overlap_comm": False, "contiguous_gradients": True}
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": BATCH, "zero_optimization": zero}))
    out = tmp_path / "report.json"
    command = [sys.executable, "-m", "lightning_accel.core.cli", "preflight", "_memory_model:TinyLM"]
    options = ["--modes", "lazy", "--steps", "2", "--strategies", "zero1,zero2", "--world-size", "2"]
    options += ["--deepspeed-config", str(config), "--format", "json", "--output", str(out)]
    done = subprocess.run(
        [*command, *options], cwd=Path(__file__).parent, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = Report.from_dict(json.loads(out.read_text()))
    profile = MemoryProfile.from_dict(report.modes["lazy"]["memory"])
    rows = {f.details["strategy"]: f.details for f in report.of_kind("memory", "lazy")}
    assert sorted(rows) == ["zero1", "zero2"]
    for strategy, row in rows.items():
        assert row["zero_settings"]["reduce_bucket_size"] == 2**18 and row["zero_settings"]["overlap_comm"] is False
        from_file = predict(profile, strategy, 2, deepspeed_config={"zero_optimization": zero})
        assert row["bytes_per_rank"] == from_file < predict(profile, strategy, 2)  # the defaults' 800 MB buckets
    assert not list(tmp_path.glob(".report.json.*"))  # written through a temporary file, renamed over it


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("missing.json", "deepspeed_config='{tmp}/missing.json': cannot read it as a DeepSpeed config (JSON): "),
        ("list.json", "deepspeed_config='{tmp}/list.json': holds list, not a JSON object."),
        (
            {"zero_optimization": {"reduce_bucket_size": "auto"}},
            "deepspeed_config['zero_optimization']['reduce_bucket_size']='auto': transformers' Trainer fills \"auto\" "
            "from the model's hidden_size, and neither DeepSpeed nor Lightning does. Give the number of elements",
        ),
        (
            {"zero_optimization": {"overlap_comm": "yes"}},
            "deepspeed_config['zero_optimization']['overlap_comm']='yes': must be true or false.",
        ),
        (3, "deepspeed_config=3: accepted a DeepSpeed config dict, the path of its JSON file, or None"),
        (
            {"bf16": {"enabled": "auto"}},
            "deepspeed_config['bf16']={{'enabled': 'auto'}}: must be a dict whose 'enabled' is true or false",
        ),
    ],
    ids=["missing-file", "not-an-object", "auto", "bad-setting", "not-a-config", "bad-bf16"],
)
def test_a_bad_deepspeed_config_is_refused_before_any_step_runs(tmp_path: Path, config: Any, message: str) -> None:
    (tmp_path / "list.json").write_text("[1, 2]")
    if isinstance(config, str):
        config = str(tmp_path / config)
    # Refused before any step runs: before the model is pickled for the processes of its modes.
    with pytest.raises(ValueError) as refused:
        preflight(TinyLM(), modes=("lazy",), deepspeed_config=config)
    assert str(refused.value).startswith(message.format(tmp=tmp_path)), str(refused.value)


def test_an_interrupted_report_write_leaves_the_old_report_whole(tmp_path: Path, monkeypatch: Any) -> None:
    from lightning_accel.habana import _files

    report = tmp_path / "report.md"
    report.write_text("the previous report")

    def interrupted(source: str, target: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _files.write_text_atomically(report, "the new report")
    assert report.read_text() == "the previous report"
    assert [path.name for path in tmp_path.iterdir()] == ["report.md"]


def test_a_profile_keeps_its_precision_and_older_reports_read_as_float32() -> None:
    profile = MemoryProfile(10, 10, 20, 46, 4, 2, 2, 2, 2, "bf16-mixed")
    assert MemoryProfile.from_dict(profile.as_dict()) == profile
    older = {k: v for k, v in profile.as_dict().items() if k not in ("precision", "largest_parameter")}
    assert MemoryProfile.from_dict(older).precision == "32-true"
