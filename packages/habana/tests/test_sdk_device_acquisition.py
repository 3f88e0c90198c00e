"""No HPU is opened before the strategy has set ``HLS_MODULE_ID`` (issue 22, item 5).

On the SDK, ``hpu.get_device_name()`` (and every query that calls ``_lazy_init``) opens a card: before ``HLS_MODULE_ID``
is set that is any free card, and the launcher process keeps it. The emulator records when its HPU is opened
(``hpu.is_initialized()``), so building the precision plugin and the Trainer can be checked to open none.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from _habana_helpers import PYTHON, script_env

pytestmark = pytest.mark.emulator_only  # reads which call opened the emulated HPU

PROBE = """
import json
import sys
import lightning as L
import habana_frameworks.torch.hpu as hpu
from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUPrecisionPlugin
from lightning_accel.habana_emulator.hpu import _devices

report = {}
try:
    HPUPrecisionPlugin("16-mixed")
    report["plugin"] = "built"
except ConfigurationError as exc:
    report["plugin"] = str(exc)
report["opened_by_plugin"] = _devices.acquired_by()
L.Trainer(accelerator="hpu", devices=2, strategy="hpu_parallel", precision=sys.argv[1], logger=False)
report["opened_by_trainer"] = _devices.acquired_by()
report["opened"] = hpu.is_initialized()
hpu.get_device_name()
report["opened_by_a_name_query"] = _devices.acquired_by()
print("REPORT", json.dumps(report))
"""


def _probe(generation: str) -> dict[str, object]:
    env = script_env(LIGHTNING_ACCEL_EMULATE_HPU_TYPE=generation)
    done = subprocess.run([PYTHON, "-c", PROBE, "16-mixed"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))
    report: dict[str, object] = json.loads(line[len("REPORT ") :])
    return report


# Gaudi 2 and 3: the emulated SDK (1.24) runs on no other (a first-generation Gaudi fails its load).
@pytest.mark.parametrize("generation", ["gaudi2", "gaudi3"])
def test_16_mixed_and_the_trainer_open_no_hpu_before_the_strategy_chooses_one(generation: str) -> None:
    report = _probe(generation)
    assert report["plugin"] == "built"
    assert report["opened_by_plugin"] is None and report["opened_by_trainer"] is None and report["opened"] is False
    # The probe can see an opening: a name query is one.
    assert report["opened_by_a_name_query"] == "hpu.get_device_name()"
