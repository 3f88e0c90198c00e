"""Gaudi's device out-of-memory error is an out-of-memory error for Lightning: batch-size finding and clean-up.

The SDK raises a ``RuntimeError`` with its own text (gaudi-pytorch-bridge bcc5172, ``device_memory.cpp``):
``"[Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::<bytes> (<MiB>)MB"``. Lightning's
``is_oom_error`` knows CUDA's text only; once a Trainer has set up an HPU it knows the SDK's too. The end-to-end runs
give the emulated HPU a small memory (``LIGHTNING_ACCEL_EMULATE_HPU_MEMORY``, read when the SDK loads), in a child
process each.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch.tuner.batch_size_scaling as batch_size_scaling
import lightning.pytorch.utilities.memory as lightning_memory
import pytest
from _habana_helpers import PYTHON, SCRIPTS, script_env
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel

from lightning_accel.habana._oom import is_hpu_out_of_memory, recognise_hpu_out_of_memory

# The three device out-of-memory texts of the SDK (bcc5172 / 1.19.0): a tensor's memory (device_memory.cpp), the graph
# workspace (device.cpp), the allocator without a memory pool (HPUAllocator.cpp).
SDK_OUT_OF_MEMORY = [
    "[Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::268435456 (256)MB",
    "[Rank:5] FATAL ERROR :: MODULE:PT_SYNHELPER workspace Allocation of size ::1048576 failed!",
    "synStatus=26 [Device memory allocation failed] allocate failed to allocate 4096 bytes",
]
NOT_OUT_OF_MEMORY = [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x3)"),
    RuntimeError("[Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Cannot free offseted handle 7"),
    ValueError(SDK_OUT_OF_MEMORY[0]),  # the SDK's text, but not the SDK's error type
    RuntimeError(SDK_OUT_OF_MEMORY[0], "a second argument"),  # Lightning's rule: one argument, the message
]
SDK_TEXT = re.compile(r"\[Rank:0\] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::(\d+) \(([\d.e+-]+)\)MB")


@pytest.mark.parametrize("text", SDK_OUT_OF_MEMORY)
def test_the_sdks_out_of_memory_texts_are_recognised(text: str) -> None:
    assert is_hpu_out_of_memory(RuntimeError(text))


@pytest.mark.parametrize("exception", NOT_OUT_OF_MEMORY, ids=["shapes", "other-devmem-fatal", "not-runtime", "args"])
def test_other_errors_are_not(exception: BaseException) -> None:
    assert not is_hpu_out_of_memory(exception)


@pytest.fixture(scope="module")
def hpu_trainer_set_up() -> None:
    """A Trainer has set up an HPU in this process (what makes Lightning recognise the SDK's error)."""
    trainer = Trainer(
        accelerator="hpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(BoringModel())


def test_lightning_recognises_the_sdks_error_once_an_hpu_is_set_up(hpu_trainer_set_up: None) -> None:
    oom = RuntimeError(SDK_OUT_OF_MEMORY[0])
    # Where Lightning defines it, and the binding the batch-size finder and BatchSizeFinder call.
    for module in (lightning_memory, batch_size_scaling):
        assert module.is_oom_error(oom), module.__name__
        assert not module.is_oom_error.__wrapped__(oom)  # Lightning's own test does not know it
        # Lightning's other answers are unchanged.
        assert module.is_oom_error(RuntimeError("CUDA out of memory. Tried to allocate 2.00 MiB"))
        assert not any(module.is_oom_error(other) for other in NOT_OUT_OF_MEMORY)
    # garbage_collection_cuda lets an out-of-memory error pass and re-raises any other.
    lightning_memory.garbage_collection_cuda()


def test_recognising_twice_wraps_once_and_the_other_tree_is_its_own(hpu_trainer_set_up: None) -> None:
    wrapped = lightning_memory.is_oom_error
    recognise_hpu_out_of_memory(Trainer(accelerator="hpu", devices=1, logger=False))
    assert lightning_memory.is_oom_error is wrapped
    pytest.importorskip("pytorch_lightning")
    import pytorch_lightning.utilities.memory as twin_memory

    twin_trainer = type("Trainer", (), {"__module__": "pytorch_lightning.trainer.trainer"})()
    recognise_hpu_out_of_memory(twin_trainer)
    assert twin_memory.is_oom_error(RuntimeError(SDK_OUT_OF_MEMORY[0]))
    assert lightning_memory.is_oom_error.__wrapped__ is not twin_memory.is_oom_error.__wrapped__


def _scale(mode: str, workdir: Path) -> SimpleNamespace:
    # In a folder of its own: the Tuner saves and restores the model through a checkpoint in the working directory.
    done = subprocess.run(
        [PYTHON, str(SCRIPTS / "scale_batch_size.py"), mode],
        env=script_env(LIGHTNING_ACCEL_EMULATE_HPU_MEMORY="10MiB"),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return SimpleNamespace(**json.loads(done.stdout.splitlines()[-1]), log=done.stdout + done.stderr)


def _assert_the_sdks_error(failed: dict[str, str]) -> None:
    assert failed["type"] == "RuntimeError", failed
    match = SDK_TEXT.fullmatch(failed["text"])
    assert match is not None, failed["text"]
    size, mib = int(match[1]), float(match[2])
    assert mib == pytest.approx(size / 2**20, rel=1e-5)


@pytest.mark.emulator_only  # a device memory of 10 MiB is the emulator's setting
def test_power_scaling_finds_the_largest_power_of_two_that_fits_and_fit_runs_at_it(tmp_path: Path) -> None:
    run = _scale("power", tmp_path)
    # 10 MiB hold the model, its gradients and 128 samples' activations (about 7.4 MiB at the peak), not 256's.
    assert run.found >= 32 and run.found & (run.found - 1) == 0, run.found
    assert f"Batch size {run.found * 2} failed, trying batch size {run.found}" in run.log
    assert run.steps == 4  # the fit at the size found ran its steps
    assert run.twice == 2 * run.found
    _assert_the_sdks_error(run.failed)  # and twice the size fails with the SDK's error


@pytest.mark.emulator_only
def test_binary_search_scaling_ends_between_the_powers_of_two_that_fit_and_fail(tmp_path: Path) -> None:
    run = _scale("binsearch", tmp_path)
    largest_power = run.twice // 2
    assert largest_power <= run.found < run.twice, (run.found, run.twice)
    assert largest_power >= 32
    assert run.steps == 4
    _assert_the_sdks_error(run.failed)
