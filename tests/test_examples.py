"""The examples run, as written, on the emulators and reach a real accuracy."""

import re
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def final_accuracy(stdout: str) -> float:
    found = re.findall(r"accuracy[^0-9]*([0-9]*\.[0-9]+)", stdout, flags=re.IGNORECASE)
    assert found, stdout[-2000:]
    return float(found[-1])


@pytest.mark.parametrize(
    ("script", "args", "emulate"),
    [
        ("habana/train_digits.py", ["--devices", "1"], "hpu"),
        ("habana/train_digits.py", ["--devices", "2"], "hpu"),
        ("habana/from_gpu.py", [], "hpu"),
        ("habana/from_gpu.py", ["--strategy", "fsdp", "--max-epochs", "4"], "hpu"),
        ("graphcore/train_digits.py", ["--devices", "8", "--device-iterations", "4"], "ipu"),
    ],
    ids=["hpu-1", "hpu-2", "hpu-gpu-script", "hpu-gpu-script-fsdp", "ipu-8x4"],
)
def test_example_trains(run, tmp_path, script: str, args: list[str], emulate: str) -> None:  # type: ignore[no-untyped-def]
    process = run([str(EXAMPLES / script), *args], env={"LIGHTNING_ACCEL_EMULATE": emulate}, cwd=tmp_path)
    assert process.returncode == 0, process.stderr[-3000:]
    assert final_accuracy(process.stdout) > 0.85
