"""The Gaudi examples run as a user runs them (a child process each, on the emulator), and show what they promise."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
