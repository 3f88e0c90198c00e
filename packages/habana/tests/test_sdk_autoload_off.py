"""``LIGHTNING_ACCEL_AUTOLOAD=0`` turns auto-registration off under emulation too (issue 22, item 9b).

The emulated SDK lives in lightning-accel-habana, so loading it (at ``import torch`` in eager mode) imports
lightning-accel; that import is no request to register. A Lightning-only script is refused ``accelerator="hpu"``
with Lightning's own message, and gets it after an explicit ``import lightning_accel.habana``.
"""

from __future__ import annotations

import subprocess

import pytest
from _habana_helpers import PYTHON, script_env

pytestmark = pytest.mark.emulator_only  # the SDK emulator's own load is what is checked

SCRIPT = """
import lightning as L
from lightning.pytorch.demos.boring_classes import BoringModel

quiet = dict(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
try:
    L.Trainer(accelerator="hpu", devices=1, **quiet)
    print("REGISTERED WITHOUT A REQUEST")
except ValueError as exc:
    print("REFUSED:", exc)
import lightning_accel.habana

trainer = L.Trainer(accelerator="hpu", devices=1, **quiet)
trainer.fit(BoringModel())
print("TRAINED ON", trainer.strategy.root_device, "AFTER THE EXPLICIT IMPORT")
# Reported: leave without the interpreter's teardown. Within milliseconds of the last backward, torch 2.13's HPU
# autograd thread can still hold that backward's stashed context and abort the process while Python finalizes
# ("terminate called without an active exception", pytorch/pytorch#180701; docs/troubleshooting.md).
import os, sys
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""


@pytest.mark.parametrize("mode", ["0", "1"], ids=["eager", "lazy"])
def test_autoload_off_holds_while_the_emulated_sdk_loads(mode: str) -> None:
    env = script_env(LIGHTNING_ACCEL_AUTOLOAD="0", PT_HPU_LAZY_MODE=mode)
    done = subprocess.run([PYTHON, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "REFUSED: You selected an invalid accelerator name: `accelerator='hpu'`." in done.stdout, done.stdout
    assert "TRAINED ON hpu AFTER THE EXPLICIT IMPORT" in done.stdout
