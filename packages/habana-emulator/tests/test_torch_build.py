"""Which torch builds the emulated HPU runs on: CPU-only ones, backed by the host.

torch (up to 2.13) admits one accelerator per process, taken from its build. Tried on an NVIDIA H200 with torch
2.11.0+cu130: with the HPU device loaded, every backward through HPU tensors trips torch's own assertion
(``engine.cpp``: "opt_ready_stream && opt_parent_stream"), whether the HPU's memory was on the host or on the GPU.
So the emulator refuses such builds, and a GPU backing, at load, with the reason and the fix.
"""

from __future__ import annotations

import subprocess

import pytest
import torch
from _emulator_helpers import PYTHON, script_env

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana_emulator import _native

pytestmark = pytest.mark.emulator_only


@pytest.mark.parametrize("accelerator", ["cuda", "rocm", "xpu", "mps"])
def test_a_torch_built_with_another_accelerator_is_refused_with_the_reason_and_the_fix(accelerator: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        _native.refuse_other_accelerator(accelerator)
    message = str(refused.value)
    assert f"needs a CPU-only build of torch, and torch {torch.__version__} is built with {accelerator!r}" in message
    assert "torch allows one accelerator per process" in message
    assert "pip install 'torch==<version>' --index-url https://download.pytorch.org/whl/cpu" in message


def test_this_cpu_only_torch_is_accepted() -> None:
    assert _native._built_accelerator() is None  # the suite runs on a CPU-only build, as the emulator needs
    _native.refuse_other_accelerator(None)


def test_a_gpu_backing_is_refused_at_load_naming_the_variable_and_what_is_accepted() -> None:
    env = script_env(LIGHTNING_ACCEL_EMULATE="hpu", LIGHTNING_ACCEL_EMULATE_BACKEND="cuda")
    done = subprocess.run(
        [PYTHON, "-c", "import habana_frameworks.torch.core"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    refusal = "ConfigurationError: LIGHTNING_ACCEL_EMULATE_BACKEND='cuda': a GPU cannot back the emulated HPU"
    assert refusal in done.stderr
    assert "torch allows one accelerator per process" in done.stderr
    assert "Accepted: 'cpu'; unset LIGHTNING_ACCEL_EMULATE_BACKEND." in done.stderr
