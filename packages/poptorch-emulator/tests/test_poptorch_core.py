"""``poptorch.poptorch_core`` is a submodule, as in poptorch 3.4, whose names other than the errors are refused.

poptorch's own test helpers (``tests/helpers.py``) start with ``import poptorch.poptorch_core as poptorch_core``.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

from lightning_accel import poptorch_emulator
from lightning_accel.core.emulation import follow_emulated_sdk_names


def test_import_poptorch_dot_poptorch_core_gives_the_emulators_module() -> None:
    follow_emulated_sdk_names()
    binding = importlib.import_module("poptorch.poptorch_core")
    assert binding is poptorch_emulator.poptorch_core
    assert importlib.import_module("poptorch").poptorch_core is binding


def test_the_binding_has_poptorchs_errors_and_refuses_every_other_name() -> None:
    binding = poptorch_emulator.poptorch_core
    assert binding.Error is poptorch_emulator.Error
    assert binding.RecoverableError is poptorch_emulator.RecoverableError
    assert binding.UnrecoverableError is poptorch_emulator.UnrecoverableError
    with pytest.raises(poptorch_emulator.Error, match=r"poptorch\.poptorch_core is not emulated: .*C\+\+ binding"):
        binding.propagateInputShapes  # noqa: B018 - reading the name is what refuses
    with pytest.raises(poptorch_emulator.Error, match=r"poptorch\.poptorch_core is not emulated"):
        binding(None)


def test_dunder_look_ups_on_the_binding_stay_attribute_errors() -> None:
    # The import system, pickle and inspect probe optional dunders; a refusal there would break them.
    binding = poptorch_emulator.poptorch_core
    assert not hasattr(binding, "__wrapped__")
    assert inspect.ismodule(binding)
    assert {"Error", "RecoverableError", "UnrecoverableError"} <= dict(inspect.getmembers(binding)).keys()
