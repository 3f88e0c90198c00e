"""HPUProfiler: default, custom and distributed profiling; traces are valid Chrome/TensorBoard JSON."""

from __future__ import annotations

import enum
import gc
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from _habana_helpers import PYTHON, SCRIPTS, digits_classifier, digits_loaders, free_port, script_env
from lightning.pytorch import Trainer
from lightning.pytorch.profilers import PyTorchProfiler
from torch.profiler import ProfilerActivity

from lightning_accel.core.emulation import reset_emulation_settings
from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUProfiler, sdk
from lightning_accel.habana import profiler as profiler_module


def _trace(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    assert isinstance(data["traceEvents"], list) and data["traceEvents"], f"{path} has no trace events"
    for event in data["traceEvents"]:
        assert "ph" in event and "name" in event  # the fields Chrome tracing and the TensorBoard plugin need
    return data


def _names(data: dict[str, Any]) -> set[str]:
    return {event["name"] for event in data["traceEvents"]}


def test_importable_from_both_paths_and_a_pytorch_profiler() -> None:
    assert profiler_module.HPUProfiler is HPUProfiler
    assert isinstance(HPUProfiler(), PyTorchProfiler)


def test_activities_are_resolved_when_profiling_starts_after_the_sdk_swapped_the_enum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The SDK replaces torch.profiler.ProfilerActivity with its own enum when it loads; a profiler built earlier
    # must still hand the profile the members of the enum in force.
    class SwappedActivity(enum.Enum):
        CPU = 0
        HPU = 1

    requested = HPUProfiler(activities=[ProfilerActivity.CPU])
    default = HPUProfiler()
    monkeypatch.setattr(torch.profiler, "ProfilerActivity", SwappedActivity)
    monkeypatch.setattr(profiler_module.sdk, "profiler_activities", lambda: [SwappedActivity.CPU, SwappedActivity.HPU])
    created: list[Any] = []

    class RecordingProfile:
        def __init__(self, activities: Any = None) -> None:
            created.append(activities)

        def __exit__(self, *args: Any) -> None:
            pass

    monkeypatch.setattr(torch.profiler, "profile", RecordingProfile)
    for profiler in (requested, default):
        profiler._create_profilers()
    assert created == [[SwappedActivity.CPU], [SwappedActivity.CPU, SwappedActivity.HPU]]
    unknown = HPUProfiler(activities=[ProfilerActivity.XPU])
    with pytest.raises(ConfigurationError, match=r"'XPU' is not a torch.profiler.ProfilerActivity of this process"):
        unknown._create_profilers()


def test_default_profiling_writes_a_trace_and_summary_is_the_operator_table(tmp_path: Path) -> None:
    profiler = HPUProfiler(dirpath=tmp_path, filename="profile")
    train, _ = digits_loaders()
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_epochs=1,
        limit_train_batches=8,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        profiler=profiler,
    )
    trainer.fit(digits_classifier(), train)
    traces = sorted(tmp_path.glob("*.pt.trace.json"))
    assert traces, list(tmp_path.iterdir())
    names = _names(_trace(traces[0]))
    assert any("aten::addmm" in name or "aten::linear" in name for name in names)
    table = profiler.summary()
    assert "Name" in table and "Self CPU" in table and "# of Calls" in table
    assert "ProfilerStep*" in table and "aten::" in table


def test_lightnings_pytorch_profiler_records_hpu_activity_as_it_records_cuda_on_gpus(tmp_path: Path) -> None:
    # profiler="pytorch" from a GPU script: Lightning adds CUDA activity where CUDA is, and knows no HPU. (In this
    # process, one HPU: a process group started here would outlive the test and hold its port.)
    train, _ = digits_loaders()
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_epochs=1,
        limit_train_batches=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        profiler="pytorch",
        default_root_dir=tmp_path,
    )
    assert type(trainer.profiler) is PyTorchProfiler
    trainer.fit(digits_classifier(), train)
    activities = [activity.name for activity in trainer.profiler._profiler_kwargs["activities"]]
    assert activities == ["CPU", "HPU"]
    assert sorted(tmp_path.rglob("*.pt.trace.json"))  # the profiled steps ran with it (CPU activity on the emulator)


def test_activities_a_user_chose_are_left_alone() -> None:
    chosen = [ProfilerActivity.CPU, ProfilerActivity.XPU]
    profiler = PyTorchProfiler(activities=chosen)
    profiler_module.record_hpu_activity(profiler)
    assert profiler._profiler_kwargs["activities"] == chosen
    hpu = HPUProfiler()
    before = list(hpu._profiler_kwargs["activities"])
    profiler_module.record_hpu_activity(hpu)  # its own class sets up its activities
    assert hpu._profiler_kwargs["activities"] == before


def test_custom_actions_outside_the_trainer_appear_in_the_summary() -> None:
    custom = HPUProfiler(schedule=None)  # record from the first call (the default schedule waits for steps)
    with custom.profile("outside_trainer"):
        torch.ones(4, 4) @ torch.ones(4, 4)
    summary = custom.summary()
    assert "Name" in summary and "aten::mm" in summary and "outside_trainer" in summary


def test_distributed_profiling_writes_one_trace_per_rank_with_custom_actions(tmp_path: Path) -> None:
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    command = [PYTHON, str(SCRIPTS / "ddp_profile.py"), "--out", str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    traces = sorted(tmp_path.glob("*.pt.trace.json"))
    assert len(traces) == 2, [p.name for p in tmp_path.iterdir()]
    # fit-perf-logs-<rank>-<action>.<timestamp>.pt.trace.json: one trace per rank, named by rank
    assert sorted(p.name.split("perf-logs-")[1].split("-")[0] for p in traces) == ["0", "1"]
    for trace in traces:
        names = _names(_trace(trace))
        assert "[pl][profile]my_custom_action" in names
        assert "[pl][profile]my_granular_action" in names
    summaries = sorted(p.name for p in tmp_path.glob("*perf-logs*.txt"))
    assert len(summaries) == 2


def test_without_hpus_the_profiler_says_it_records_the_cpu_only(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LIGHTNING_ACCEL_EMULATE", "0")
    reset_emulation_settings()
    clean_env.setattr(sdk, "is_sdk_installed", lambda: False)
    with pytest.warns(UserWarning, match=r"HPUProfiler records CPU activity only: no HPU can be used in this process"):
        assert profiler_module._activities() == [ProfilerActivity.CPU]


def _one_step_trainer(profiler: HPUProfiler) -> Trainer:
    return Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        profiler=profiler,
    )


def test_the_sdks_own_habana_profile_is_accepted_silently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK sets HABANA_PROFILE=profile_api_light when it loads and the variable is unset (bridge 1.19
    # core/__init__.py), so on Gaudi every profiled run sees it.
    monkeypatch.setenv("HABANA_PROFILE", "profile_api_light")
    profiler = HPUProfiler(dirpath=tmp_path, filename="profile")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _one_step_trainer(profiler).fit(digits_classifier(), digits_loaders()[0])
    assert not [w for w in caught if "HABANA_PROFILE" in str(w.message)]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("profile_api", r"HABANA_PROFILE='profile_api' turns on the Intel Gaudi profiling subsystem"),
        ("0", r"HABANA_PROFILE='0' keeps the SDK from setting its default 'profile_api_light'"),
    ],
)
def test_a_habana_profile_of_the_users_own_is_said(value: str, says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABANA_PROFILE", value)
    profiler = HPUProfiler(schedule=None)
    with pytest.warns(UserWarning, match=says):
        profiler._create_profilers()  # what the Trainer calls when profiling starts
    profiler.profiler = None  # never started: nothing to stop at teardown


def test_habana_profile_set_is_said_when_profiling_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABANA_PROFILE", "1")
    profiler = HPUProfiler(dirpath=tmp_path, filename="profile")
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        profiler=profiler,
    )
    with pytest.warns(UserWarning, match=r"HABANA_PROFILE='1' turns on the Intel Gaudi profiling subsystem"):
        trainer.fit(digits_classifier(), digits_loaders()[0])


def test_a_dirpath_that_is_a_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    (tmp_path / "traces").write_text("not a directory")
    with pytest.raises(
        ConfigurationError, match=r"HPUProfiler\(dirpath='.*traces'\) is a file\. Accepted: a directory"
    ):
        HPUProfiler(dirpath=tmp_path / "traces")
    gc.collect()
    assert unraisable == []  # the refused profiler is collected quietly: Lightning's __del__ finds what it reads
