"""HPUAccelerator: device parsing, device lists, names and the exact errors for bad ``devices``."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer

from lightning_accel.habana import HPUAccelerator, SingleHPUStrategy

ACCEPTED = (
    "Accepted: a positive int (e.g. devices=2), -1 for every visible HPU, the same as a string (e.g. '2'), or 'auto'. "
    "Lists of device indices are not supported: each process is given its HPU by the runtime, so pass a count."
)


@pytest.mark.emulator_only
def test_basics() -> None:
    assert HPUAccelerator.name() == "hpu"
    assert HPUAccelerator.is_available()
    assert HPUAccelerator.auto_device_count() == 8
    assert HPUAccelerator.get_device_name() == "GAUDI2 (emulated)"


@pytest.mark.parametrize(("given", "expected"), [(1, 1), (8, 8), ("2", 2), (" 3 ", 3), ("auto", 8), (-1, 8), ("-1", 8)])
def test_parse_devices_accepts_counts(given: object, expected: int) -> None:
    assert HPUAccelerator.parse_devices(given) == expected


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ([0, 1], f"devices=[0, 1] (list) is not accepted by HPUAccelerator. {ACCEPTED}"),
        ("0,1", f"devices='0,1' is not accepted by HPUAccelerator. {ACCEPTED}"),
        ("two", f"devices='two' is not accepted by HPUAccelerator. {ACCEPTED}"),
        (1.5, f"devices=1.5 (float) is not accepted by HPUAccelerator. {ACCEPTED}"),
        (True, f"devices=True (bool) is not accepted by HPUAccelerator. {ACCEPTED}"),
        (-2, f"devices=-2 is not accepted by HPUAccelerator. {ACCEPTED}"),
        (
            9,
            "devices=9 asks for 9 HPUs, but only 8 are visible to this process. Accepted: 1 to 8, -1 or 'auto' for all "
            "of them. Check HABANA_VISIBLE_MODULES, or with the emulator set LIGHTNING_ACCEL_EMULATED_DEVICES to a "
            "larger number.",
        ),
    ],
)
def test_parse_devices_rejects_with_exact_message(given: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        HPUAccelerator.parse_devices(given)
    assert str(info.value) == message


def test_trainer_reports_bad_devices() -> None:
    with pytest.raises(ValueError, match=r"devices=16 asks for 16 HPUs, but only 8 are visible"):
        Trainer(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy(), devices=16)


def test_parallel_devices_are_hpus_without_index() -> None:
    # As on Gaudi: each process drives one card, which torch knows as "hpu".
    assert HPUAccelerator.get_parallel_devices(3) == [torch.device("hpu")] * 3


def test_setup_device_rejects_foreign_devices() -> None:
    with pytest.raises(ValueError, match=r"HPUAccelerator got device=device\(type='meta'\), which is not an HPU. Acc"):
        HPUAccelerator().setup_device(torch.device("meta"))


def test_device_stats_has_the_ten_keys() -> None:
    stats = HPUAccelerator().get_device_stats(torch.device("hpu"))
    assert list(stats) == [
        "Limit",
        "InUse",
        "MaxInUse",
        "NumAllocs",
        "NumFrees",
        "ActiveAllocs",
        "MaxAllocSize",
        "TotalSystemAllocs",
        "TotalSystemFrees",
        "TotalActiveAllocs",
    ]
