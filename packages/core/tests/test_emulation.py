from __future__ import annotations

import pytest

from lightning_accel.core.discovery import discovered_plugins
from lightning_accel.core.emulation import emulation_settings, reset_emulation_settings
from lightning_accel.core.errors import ConfigurationError


def settings_with(monkeypatch: pytest.MonkeyPatch, **env: str):  # type: ignore[no-untyped-def]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_emulation_settings()
    return emulation_settings()


def test_defaults_emulate_nothing() -> None:
    settings = emulation_settings()
    assert not settings.emulates("testacc")
    assert (settings.devices, settings.backend) == (8, "cpu")


def test_names_from_installed_plugins_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_with(monkeypatch, LIGHTNING_ACCEL_EMULATE=" TestAcc ", LIGHTNING_ACCEL_EMULATED_DEVICES="2")
    assert settings.emulates("testacc") and not settings.emulates("ipu")
    assert settings.devices == 2


def test_all_emulates_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings_with(monkeypatch, LIGHTNING_ACCEL_EMULATE="all").emulates("anything")


@pytest.mark.parametrize("off", ["", "0", "off", "none"])
def test_off_values(monkeypatch: pytest.MonkeyPatch, off: str) -> None:
    assert not settings_with(monkeypatch, LIGHTNING_ACCEL_EMULATE=off).emulates("testacc")


def test_unknown_device_type_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError) as error:
        settings_with(monkeypatch, LIGHTNING_ACCEL_EMULATE="testacc,tpu9")
    # The accepted names are those the installed plugins declare: testacc here, plus any vendor installed alongside.
    accepted = ", ".join(repr(name) for name in sorted(n for p in discovered_plugins() for n in p.emulates))
    assert "'testacc'" in accepted
    assert str(error.value) == (
        "LIGHTNING_ACCEL_EMULATE='testacc,tpu9' names unknown device type(s) 'tpu9'. Accepted: 'all', a "
        f"comma-separated list of {accepted}, or '0' to turn emulation off. Install the vendor extra first (e.g. "
        "`pip install lightning-accel[habana]`) if the device type you want is missing."
    )


@pytest.mark.parametrize("value", ["0", "-3", "eight", "4096"])
def test_bad_device_count(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    with pytest.raises(ConfigurationError, match=f"LIGHTNING_ACCEL_EMULATED_DEVICES='{value}' is not a valid device"):
        settings_with(monkeypatch, LIGHTNING_ACCEL_EMULATED_DEVICES=value)


def test_bad_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError) as error:
        settings_with(monkeypatch, LIGHTNING_ACCEL_EMULATE_BACKEND="tpu")
    assert str(error.value) == (
        "LIGHTNING_ACCEL_EMULATE_BACKEND='tpu' is not a backing device. Accepted: 'cpu', 'cuda'; unset it for 'cpu'."
    )


def test_settings_are_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    first = settings_with(monkeypatch, LIGHTNING_ACCEL_EMULATED_DEVICES="3")
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATED_DEVICES", "5")
    assert emulation_settings() is first
    reset_emulation_settings()
    assert emulation_settings().devices == 5


ANNOUNCE = """
from lightning_accel.core.emulation import announce_emulation
announce_emulation("testacc", "testsdk")
announce_emulation("testacc", "testsdk")
"""


def test_emulation_is_announced_once_on_rank_zero_only(python) -> None:  # type: ignore[no-untyped-def]
    line = (
        "lightning-accel: emulating TESTACC (testsdk) with 3 device(s) backed by cpu; set LIGHTNING_ACCEL_EMULATE=0 "
        "to turn emulation off."
    )
    env = {"LIGHTNING_ACCEL_EMULATE": "testacc", "LIGHTNING_ACCEL_EMULATED_DEVICES": "3"}
    assert python(ANNOUNCE, env=env).stderr.splitlines() == [line]
    assert python(ANNOUNCE, env={**env, "RANK": "1"}).stderr == ""


def test_emulator_installed_reads_the_declared_emulated_sdks(monkeypatch: pytest.MonkeyPatch) -> None:
    import _lightning_accel_sdk_aliases as sdk_aliases
    from lightning_accel.core.emulation import emulator_installed

    declared = {"hpu": {"vendor_sdk.torch": "some_emulator"}}
    monkeypatch.setattr(sdk_aliases, "_cache", None)
    monkeypatch.setattr(
        sdk_aliases, "_read_entry_points", lambda tokens: {k: v for t in tokens for k, v in declared.get(t, {}).items()}
    )
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "hpu")
    assert emulator_installed("vendor_sdk.torch") is True
    assert emulator_installed("other_sdk") is False
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "ipu")  # only the device types emulated now count
    assert emulator_installed("vendor_sdk.torch") is False
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "0")
    assert emulator_installed("vendor_sdk.torch") is False


def test_a_device_type_an_installed_emulator_declares_is_accepted_without_its_plugin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An emulator distribution may be installed alone (lightning-accel-habana-emulator without the integration).
    from importlib.metadata import EntryPoint

    from lightning_accel.core import emulation

    group = "lightning_accel.emulated_sdks.npu"
    fake = [EntryPoint(name="vendor_sdk", value="some_emulator", group=group)]
    monkeypatch.setattr("importlib.metadata.entry_points", lambda **kw: _Groups({group: fake}))
    assert "npu" in emulation._emulated_sdk_device_types()
    monkeypatch.setenv("LIGHTNING_ACCEL_EMULATE", "npu")
    reset_emulation_settings()
    try:
        assert emulation_settings().emulates("npu")
    finally:
        monkeypatch.undo()
        reset_emulation_settings()


class _Groups(dict):  # type: ignore[type-arg]
    """What ``importlib.metadata.entry_points()`` returns from Python 3.10: entry points with their group names."""

    @property
    def groups(self) -> set[str]:
        return set(self)

    def select(self, group: str) -> list[object]:
        return list(self.get(group, []))
