"""The start-up lines: "<NAME> available: ..., using: N devices" next to Lightning's own, on rank 0 only."""

from __future__ import annotations

SCRIPT = """
import os
import lightning.pytorch as L
import pytorch_lightning as pl
tree, accelerator, devices = os.environ["CASE"].split()
{"L": L, "pl": pl}[tree].Trainer(accelerator=accelerator, devices=int(devices), logger=False)
"""


def _lines(process) -> list[str]:  # type: ignore[no-untyped-def]
    assert process.returncode == 0, process.stderr[-3000:]
    return [line for line in (process.stdout + process.stderr).splitlines() if " available: " in line]


def test_vendor_line_follows_lightnings_own(python) -> None:  # type: ignore[no-untyped-def]
    lines = _lines(python(SCRIPT, env={"CASE": "L testacc 2"}))
    assert lines[:2] == ["GPU available: False, used: False", "TPU available: False, using: 0 TPU cores"]
    assert "TESTACC available: True (emulated), using: 2 devices" in lines[2:]


def test_unused_and_unavailable_vendor_in_the_pytorch_lightning_tree(python) -> None:  # type: ignore[no-untyped-def]
    assert "TESTACC available: True (emulated), using: 0 devices" in _lines(python(SCRIPT, env={"CASE": "pl cpu 1"}))
    unavailable = _lines(python(SCRIPT, env={"TESTACC_UNAVAILABLE": "1", "CASE": "pl cpu 1"}))
    assert "TESTACC available: False, using: 0 devices" in unavailable
    assert "TESTACC available: True (emulated), using: 1 device" in _lines(python(SCRIPT, env={"CASE": "pl testacc 1"}))


def test_only_rank_zero_prints(python) -> None:  # type: ignore[no-untyped-def]
    assert _lines(python(SCRIPT, env={"RANK": "1", "CASE": "L testacc 1"})) == []


def _warnings(process) -> list[str]:  # type: ignore[no-untyped-def]
    assert process.returncode == 0, process.stderr[-3000:]
    return [line for line in (process.stdout + process.stderr).splitlines() if "available but not used" in line]


def test_an_available_vendor_device_left_unused_is_warned_about_as_lightning_does_for_gpus(python) -> None:  # type: ignore[no-untyped-def]
    expected = "TESTACC available but not used. You can set it by doing `Trainer(accelerator='testacc')`."
    for tree in ("L", "pl"):
        warned = _warnings(python(SCRIPT, env={"CASE": f"{tree} cpu 1"}))
        assert len(warned) == 1 and warned[0].endswith(expected), warned
    assert _warnings(python(SCRIPT, env={"CASE": "L testacc 1"})) == []
    assert _warnings(python(SCRIPT, env={"TESTACC_UNAVAILABLE": "1", "CASE": "L cpu 1"})) == []
    assert _warnings(python(SCRIPT, env={"RANK": "1", "CASE": "L cpu 1"})) == []
