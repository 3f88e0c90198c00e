"""The validated-versions table, the warning for a stack outside it, and the verdict `lightning-accel env` shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from _habana_helpers import digits_classifier, digits_loaders
from lightning.pytorch import Trainer

from lightning_accel.habana import _accelerator_common, sdk, versions
from lightning_accel.habana.versions import (
    COMPONENTS,
    SUPPORTED_TORCH,
    VALIDATED_STACKS,
    check_stack,
    markdown_table,
)

DOCS = Path(__file__).resolve().parents[3] / "docs"
ROW_1_24_0 = next(row for row in VALIDATED_STACKS if row.name == "Intel Gaudi software 1.24.0")


def _stack_of(row: versions.ValidatedStack) -> dict[str, str | None]:
    """What a machine with ``row`` installed reports: a wheel's build number, Intel's torch build, the fork."""
    return {
        "sdk": f"{row.sdk}.524",
        "torch": f"{row.torch}a0+git5a1b2c3",
        "lightning": row.lightning,
        "transformers": f"{row.transformers}.2",
        "deepspeed": f"0.16.1+hpu.synapse.v{row.deepspeed}",
    }


def test_every_row_names_every_component_and_its_sources() -> None:
    assert len({row.name for row in VALIDATED_STACKS}) == len(VALIDATED_STACKS)
    for row in VALIDATED_STACKS:
        assert all(isinstance(getattr(row, key), str) and getattr(row, key) for key in COMPONENTS), row
        assert row.sources and all(source.strip() for source in row.sources), row
    assert [row.hardware for row in VALIDATED_STACKS].count(False) == 1  # the emulator's row


def test_supported_torch_is_the_torch_of_the_validated_rows() -> None:
    assert set(SUPPORTED_TORCH) == {row.torch for row in VALIDATED_STACKS}
    for row in VALIDATED_STACKS:
        release = SUPPORTED_TORCH[row.torch]
        assert row.name.startswith(release) if row.hardware else "emulator" in release, (row.name, release)


@pytest.mark.parametrize("row", [row for row in VALIDATED_STACKS if row.hardware], ids=lambda row: row.name)
def test_a_hardware_row_validates_the_versions_a_gaudi_machine_reports(row: versions.ValidatedStack) -> None:
    verdict = check_stack(_stack_of(row))
    assert verdict.validated and verdict.row == row and verdict.differences == {}
    assert verdict.message.startswith(f"validated (row {row.name!r}): found SDK {row.sdk}.524, torch {row.torch}a0")


def test_transformers_and_deepspeed_are_compared_only_when_installed() -> None:
    stack = dict(_stack_of(ROW_1_24_0), transformers=None, deepspeed=None)
    assert check_stack(stack).validated
    assert not check_stack(dict(stack, deepspeed="0.19.8")).validated  # upstream DeepSpeed is not Intel's fork


def test_an_unknown_component_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"unknown component\(s\) \['jax'\]; accepted: \['sdk', 'torch', "):
        check_stack({"jax": "0.4"})


def test_a_stack_outside_names_what_was_found_and_the_nearest_hardware_row() -> None:
    found = dict(_stack_of(ROW_1_24_0), transformers="4.57.1")
    verdict = check_stack(found)
    assert not verdict.validated
    assert verdict.row == ROW_1_24_0
    assert verdict.differences == {"transformers": ("4.57.1", "4.55")}
    assert "found SDK 1.24.0.524, torch 2.10.0a0+git5a1b2c3, Lightning 2.6.6, transformers 4.57.1, DeepSpeed" in (
        verdict.message
    )
    assert "The nearest validated row is Intel Gaudi software 1.24.0 (SDK 1.24.0, torch 2.10.0, " in verdict.message
    # The emulator's torch on a Gaudi SDK is no advice: the nearest row stays a hardware row.
    assert check_stack(dict(found, torch="2.8.0")).row == ROW_1_24_0


def test_the_docs_show_the_table() -> None:
    assert markdown_table() in (DOCS / "habana" / "basic.md").read_text(encoding="utf-8")


def _fit_twice(monkeypatch: pytest.MonkeyPatch, found: dict[str, str | None]) -> list[str]:
    monkeypatch.setattr(versions, "installed_stack", lambda: dict(found))
    _accelerator_common._warn_about_torch_once.cache_clear()
    train, val = digits_loaders()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):  # two runs in one process: one warning
                trainer = Trainer(accelerator="hpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False)
                trainer.fit(digits_classifier(), train, val)
    finally:
        _accelerator_common._warn_about_torch_once.cache_clear()
    return [str(w.message) for w in caught if "validated" in str(w.message)]


def test_a_validated_stack_gets_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _fit_twice(monkeypatch, _stack_of(ROW_1_24_0)) == []


def test_a_stack_outside_gets_one_warning_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = _fit_twice(monkeypatch, dict(_stack_of(ROW_1_24_0), transformers="4.57.1"))
    assert len(messages) == 1
    assert messages[0].startswith("lightning-accel-habana: not a validated stack: found SDK 1.24.0.524, torch 2.10.0a0")
    assert "transformers 4.57.1 where the row has 4.55" in messages[0]
    assert "nearest validated row is Intel Gaudi software 1.24.0" in messages[0]


def test_an_unsupported_torch_is_told_in_the_same_single_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = _fit_twice(monkeypatch, dict(_stack_of(ROW_1_24_0), torch="2.8.0"))
    assert len(messages) == 1
    assert messages[0].startswith("torch 2.8.0 is not a version lightning-accel-habana is checked against")
    assert "torch 2.8.0 where the row has 2.10.0" in messages[0]


def _env(*args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    script = "\n".join(
        ["import sys", code, "from lightning_accel.core.cli import main", "sys.exit(main(['env', *sys.argv[1:]]))"]
    )
    environ = dict(os.environ, LIGHTNING_ACCEL_EMULATE="hpu")
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=environ, timeout=300, check=True
    )


def test_env_prints_the_verdict_of_this_stack() -> None:
    expected = check_stack(versions.installed_stack()).message
    if sdk.is_emulated():  # this suite's own stack (the emulator's SDK 1.24.0 and torch 2.13) is the emulator's row
        assert expected.startswith('validated (row "Gaudi SDK emulator (this project\'s CI)"): found SDK 1.24.0, ')
    lines = _env().stdout.splitlines()
    assert "habana:" in lines
    assert lines[lines.index("habana:") + 1] == f"  validated versions: {expected}"
    assert json.loads(_env("--json").stdout)["checks"]["habana"] == {"validated versions": expected}


def test_env_names_the_nearest_row_of_a_stack_outside() -> None:
    patch = (
        "from lightning_accel.habana import versions; "
        "versions.installed_stack = lambda: {'sdk': '1.23.0', 'torch': '2.9.1', 'lightning': '2.6.6', "
        "'transformers': '4.51.3', 'deepspeed': None}"
    )
    out = _env(code=patch).stdout
    assert "  validated versions: not a validated stack: found SDK 1.23.0, torch 2.9.1, Lightning 2.6.6, " in out
    assert "nearest validated row is Intel Gaudi software 1.23.0" in out
    assert "transformers 4.51.3 where the row has 4.55" in out
