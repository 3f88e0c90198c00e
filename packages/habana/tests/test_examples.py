"""The Gaudi examples run as a user runs them (a child process each, on the emulator), and show what they promise."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from _habana_helpers import PYTHON, script_env

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "habana"


def _run(name: str, cwd: Path, **env: str) -> str:
    done = subprocess.run(
        [PYTHON, str(EXAMPLES / name)], env=script_env(**env), cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def test_compile_example_trains_and_infers_with_hpu_backend(tmp_path: Path) -> None:
    out = _run("compile.py", tmp_path)
    accuracy = float(out.rsplit("accuracy of the compiled inference model:", 1)[1].split()[0])
    assert accuracy > 0.8


def test_compiled_gpt_example_compiles_every_block_and_learns(tmp_path: Path) -> None:
    out = _run("compile_gpt.py", tmp_path, PT_HPU_LAZY_MODE="0")
    assert "blocks compiled: 4 of 4" in out
    first, last = (float(v) for v in re.search(r"loss: first steps ([\d.]+), last steps ([\d.]+)", out).groups())  # type: ignore[union-attr]
    assert last < 0.5 * first


def test_mixed_precision_example_runs_the_listed_ops_in_bf16(tmp_path: Path) -> None:
    # The SDK reads the lists when it loads (at `import torch` in eager mode): exported before the start, as documented.
    out = _run(
        "mixed_precision.py",
        tmp_path,
        PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST=str(EXAMPLES / "ops_bf16_mnist.txt"),
        PT_HPU_AUTOCAST_FP32_OPS_LIST=str(EXAMPLES / "ops_fp32_mnist.txt"),
    )
    assert "linear output: torch.bfloat16, loss: torch.float32, weights: torch.float32" in out


def test_profiler_example_writes_a_trace_and_a_summary(tmp_path: Path) -> None:
    _run("profiler.py", tmp_path)
    written = sorted(p.name for p in (tmp_path / "profiler_logs").iterdir())
    assert any(name.endswith(".json") for name in written), written
    assert any(name.endswith(".txt") for name in written), written


def test_fp8_example_trains_in_fp8_and_is_refused_on_first_generation_gaudi(tmp_path: Path) -> None:
    out = _run("fp8_training.py", tmp_path)
    line = out.split("relative error against float32: fp8 ", 1)[1].splitlines()[0]  # "0.0348, bf16-mixed 0.0027"
    fp8, bf16 = float(line.split(",")[0]), float(line.split()[-1])
    assert 0.01 < fp8 < 0.1 and bf16 < fp8 / 8
    assert "Transformer Engine layers: 2" in out
    assert float(out.rsplit("validation accuracy in fp8:", 1)[1].split()[0]) > 0.9
    # The emulated SDK (1.24) runs on Gaudi 2 and 3 only: on a first-generation Gaudi the load itself refuses.
    refused = subprocess.run(
        [PYTHON, str(EXAMPLES / "fp8_training.py")],
        env=script_env(LIGHTNING_ACCEL_EMULATE_HPU_TYPE="gaudi"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert refused.returncode != 0
    assert "LIGHTNING_ACCEL_EMULATE_HPU_TYPE='gaudi' is not supported: first-generation Gaudi" in refused.stderr


@pytest.mark.slow
def test_fsdp_example_shards_over_two_hpus_and_trains(tmp_path: Path) -> None:
    out = _run("fsdp.py", tmp_path)
    # Two ranks print to one pipe: a line of one can land inside a line of the other, so match the phrases, not lines.
    assert sorted(re.findall(r"rank (\d+) holds (\d+) of (\d+) parameters", out)) == [
        ("0", "4805", "9610"),
        ("1", "4805", "9610"),
    ]
    assert float(out.rsplit("validation accuracy:", 1)[1].split()[0]) > 0.8
    assert (tmp_path / "fsdp.ckpt").is_file()


@pytest.mark.slow
def test_model_parallel_example_splits_each_layer_over_two_hpus_and_trains(tmp_path: Path) -> None:
    out = _run("model_parallel.py", tmp_path)  # tensor parallel over 2 HPUs, from Lightning's ModelParallelStrategy
    # Each rank: half of the two blocks' weights and first biases (131,584), their second biases, replicated by
    # RowwiseParallel (256), and the embedding and head, not parallelized (9,610): 141,450 of 273,034.
    assert sorted(re.findall(r"rank (\d+) holds (\d+) of (\d+) parameters", out)) == [
        ("0", "141450", "273034"),
        ("1", "141450", "273034"),
    ]
    assert float(out.rsplit("validation accuracy:", 1)[1].split()[0]) > 0.85
    shards = sorted(path.name for path in (tmp_path / "model_parallel.ckpt").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"], shards
