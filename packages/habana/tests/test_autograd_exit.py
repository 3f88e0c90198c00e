"""A run on HPUs ends its process cleanly: at exit, the HPU's autograd thread holds nothing of the last backward.

torch 2.13 stashes the caller's ``contextvars`` context in each backward's graph task, and the HPU's autograd thread
may drop it after the interpreter began to end, which aborts the process ("terminate called without an active
exception") after a run that succeeded (see ``lightning_accel.habana._autograd_exit``). CI met it once in a test
whose child process ended right after a one-step Trainer run.
"""

from __future__ import annotations

import contextvars
import json
import subprocess
import weakref

import torch
from _habana_helpers import PYTHON, script_env

from lightning_accel.habana import _autograd_exit

_VALUE = contextvars.ContextVar("value")


class _Value:
    """A context variable's value: the backward stashes the context that holds it."""


def test_the_exit_handler_leaves_nothing_of_the_last_backward_on_the_autograd_thread() -> None:
    value = _Value()
    released = weakref.ref(value)
    token = _VALUE.set(value)
    weight = torch.randn(8, 8, device="hpu", requires_grad=True)
    (weight @ weight).sum().backward()
    _VALUE.reset(token)
    del value
    _autograd_exit._finish_autograd()
    assert released() is None
    assert weight.grad is not None and weight.grad.device.type == "hpu"  # the last backward itself is untouched


SCRIPT = """
import atexit, json, sys
registered = []
register = atexit.register
def recording(function, *args, **kwargs):
    registered.append(f"{function.__module__}.{function.__qualname__}")
    return register(function, *args, **kwargs)
atexit.register = recording

import lightning as L
from lightning.pytorch.demos.boring_classes import BoringModel

if sys.argv[1] == "trainer":
    trainer = L.Trainer(accelerator="hpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(BoringModel())
else:
    L.Fabric(accelerator="hpu", devices=1).launch()  # sets the device up
print(json.dumps(registered))
"""


def _registered(kind: str) -> list[str]:
    done = subprocess.run([PYTHON, "-c", SCRIPT, kind], env=script_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_trainer_run_and_a_fabric_launch_register_it_once() -> None:
    handler = "lightning_accel.habana._autograd_exit._finish_autograd"
    assert _registered("trainer").count(handler) == 1
    assert _registered("fabric").count(handler) == 1
