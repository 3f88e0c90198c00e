"""The pre-flight report's ZeRO rows against the emulator's measured peak per rank, in real two-process DeepSpeed runs.

The prediction comes from one emulated HPU's plain step (``lightning_accel.habana.preflight``), read with the run's
own ZeRO config; each setup then trains two steps under HPUDeepSpeedStrategy on two emulated HPUs
(``scripts/preflight_zero_memory.py``), and each rank reads the peak of its second step.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _ds_hpu_helpers import SCRIPTS, read_json, run_script

from lightning_accel.habana.preflight import MemoryProfile, predict, preflight

sys.path.insert(0, str(SCRIPTS))
from preflight_zero_memory import BUCKET, TinyLM

TOLERANCE = 0.10
MIB = 2**20

pytestmark = pytest.mark.emulator_only  # compares with the emulator's exact allocation accounting


def _profile(precision: str | None = None) -> MemoryProfile:
    report = preflight(TinyLM(), modes=("lazy",), steps=2, strategies=(), world_size=2, tp_size=1, precision=precision)
    return MemoryProfile.from_dict(report.modes["lazy"]["memory"])


@pytest.fixture(scope="module")
def profile() -> MemoryProfile:
    return _profile()


@pytest.fixture(scope="module")
def bf16_profiles() -> tuple[MemoryProfile, MemoryProfile]:
    return _profile("bf16-true"), _profile("bf16-mixed")


@pytest.mark.parametrize("setup", ["zero1", "zero2", "zero3", "zero1_offload", "zero2_offload", "zero3_offload"])
def test_zero_prediction_within_10_percent_of_the_measured_peak_per_rank(
    profile: MemoryProfile, setup: str, tmp_path: Path
) -> None:
    run_script("preflight_zero_memory.py", str(tmp_path), setup)
    for rank in (0, 1):
        result = read_json(tmp_path / f"rank{rank}.json")
        zero = result["config"]["zero_optimization"]
        assert (zero["reduce_bucket_size"], zero["overlap_comm"], zero["contiguous_gradients"]) == (BUCKET, True, True)
        predicted = predict(profile, setup, 2, deepspeed_config=result["config"])
        measured = result["peak"]
        assert abs(predicted - measured) <= TOLERANCE * measured, (setup, rank, predicted, measured)


def test_the_default_gradient_buckets_dominate_a_small_models_zero_1_and_2(profile: MemoryProfile) -> None:
    # HPUDeepSpeedStrategy's reduce_bucket_size=2e8 elements: two float32 buckets of 800 MB with overlap_comm,
    # allocated whatever the model's size (measured on the emulator for this model: 1.64 GB per rank at stage 1).
    default = predict(profile, "zero1", 2)
    assert 1600e6 < default < 1600e6 + 40 * MIB
    assert (
        predict(profile, "zero1", 2, deepspeed_config={"zero_optimization": {"contiguous_gradients": False}}) < 50 * MIB
    )


def test_a_bad_zero_setting_is_refused_by_name(profile: MemoryProfile) -> None:
    with pytest.raises(
        ValueError, match=r"deepspeed_config\['zero_optimization'\]\['reduce_bucket_size'\]='big': must"
    ):
        predict(profile, "zero2", 2, deepspeed_config={"zero_optimization": {"reduce_bucket_size": "big"}})


@pytest.mark.parametrize("setup", ["zero1", "zero3", "zero3_offload"])
def test_bf16_zero_prediction_within_10_percent_of_the_measured_peak_per_rank(
    bf16_profiles: tuple[MemoryProfile, MemoryProfile], setup: str, tmp_path: Path
) -> None:
    # DeepSpeed's bf16 trains a bf16 model with float32 master weights, optimizer state and step gradients. A profile
    # measured in bf16-true gives the working memory DeepSpeed's model has; one measured under autocast (bf16-mixed)
    # also holds autocast's bf16 copies of the weights, so its prediction errs high.
    run_script("preflight_zero_memory.py", str(tmp_path), setup, "bf16-mixed")
    exact, autocast = bf16_profiles
    for rank in (0, 1):
        result = read_json(tmp_path / f"rank{rank}.json")
        assert result["config"]["bf16"] == {"enabled": True}
        measured = result["peak"]
        predicted = predict(exact, setup, 2, deepspeed_config=result["config"])
        assert abs(predicted - measured) <= TOLERANCE * measured, (setup, rank, predicted, measured)
        # The config's bf16 section, or without it the profile's 16-bit precision, makes the model 16-bit.
        without_section = {"zero_optimization": result["config"]["zero_optimization"]}
        assert predict(exact, setup, 2, deepspeed_config=without_section) == predicted
        high = predict(autocast, setup, 2, deepspeed_config=result["config"])
        assert (1 - TOLERANCE) * measured <= high <= 1.5 * measured, (setup, rank, high, measured)
