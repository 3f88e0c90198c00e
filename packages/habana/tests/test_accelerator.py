"""HPUAccelerator: device parsing, device lists, names and the exact errors for bad ``devices``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from lightning.pytorch import Trainer

from lightning_accel.core.emulation import emulation_settings
from lightning_accel.habana import HPUAccelerator, SingleHPUStrategy, sdk

ACCEPTED = (
    "Accepted: a positive int (e.g. devices=2), -1 for every visible HPU, the same as a string (e.g. '2'), or 'auto'. "
    "Lists of device indices are not supported: each process is given its HPU by the runtime, so pass a count."
)


def _visible() -> int:
    """How many HPUs the SDK (real or emulated) shows this process: the count the tests expect, whatever it is."""
    return int(sdk.hpu_module().device_count())


@pytest.mark.emulator_only
def test_basics() -> None:
    assert HPUAccelerator.name() == "hpu"
    assert HPUAccelerator.is_available()
    assert HPUAccelerator.auto_device_count() == emulation_settings().devices
    assert HPUAccelerator.get_device_name() == "GAUDI2 (emulated)"


@pytest.mark.parametrize("form", [int, str, lambda n: f" {n} "], ids=["int", "str", "padded-str"])
def test_parse_devices_accepts_counts_up_to_the_visible_hpus(form: Callable[[int], object]) -> None:
    for count in range(1, _visible() + 1):
        assert HPUAccelerator.parse_devices(form(count)) == count


@pytest.mark.parametrize("given", ["auto", -1, "-1"])
def test_parse_devices_all_is_every_visible_hpu(given: object) -> None:
    assert HPUAccelerator.parse_devices(given) == _visible()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ([0, 1], f"devices=[0, 1] (list) is not accepted by HPUAccelerator. {ACCEPTED}"),
        ("0,1", f"devices='0,1' is not accepted by HPUAccelerator. {ACCEPTED}"),
        ("two", f"devices='two' is not accepted by HPUAccelerator. {ACCEPTED}"),
        (1.5, f"devices=1.5 (float) is not accepted by HPUAccelerator. {ACCEPTED}"),
        (True, f"devices=True (bool) is not accepted by HPUAccelerator. {ACCEPTED}"),
        (-2, f"devices=-2 is not accepted by HPUAccelerator. {ACCEPTED}"),
    ],
)
def test_parse_devices_rejects_with_exact_message(given: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        HPUAccelerator.parse_devices(given)
    assert str(info.value) == message


def test_parse_devices_refuses_more_hpus_than_are_visible() -> None:
    visible = _visible()
    with pytest.raises(ValueError) as info:
        HPUAccelerator.parse_devices(visible + 1)
    assert str(info.value) == (
        f"devices={visible + 1} asks for {visible + 1} HPUs, but only {visible} are visible to this process. Accepted: "
        f"1 to {visible}, -1 or 'auto' for all of them. Check HABANA_VISIBLE_MODULES, or with the emulator set "
        "LIGHTNING_ACCEL_EMULATED_DEVICES to a larger number."
    )


def test_trainer_reports_bad_devices() -> None:
    visible = _visible()
    with pytest.raises(ValueError, match=rf"devices={visible * 2} asks for {visible * 2} HPUs, but only {visible} are"):
        Trainer(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy(), devices=visible * 2)


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
