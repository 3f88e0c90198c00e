"""Every poptorch name our code and docs use exists in poptorch 3.4 and in the emulator, with 3.4's parameters.

The table (``data/poptorch_3_4_api.json``) is generated from poptorch's source at tag ``sdk/poptorch/3.4.0`` by
``data/generate_poptorch_api.py``. Names are collected from the package's code (the emulator aside), the examples
and the docs: ``poptorch.X`` / ``poptorch().X`` (and ``poptorch.optim.X``), and every ``.name(`` call whose name is a
method of the emulator's ``Options``, ``Options.Training`` or ``PoplarExecutor``.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

from lightning_accel.graphcore import _emulator

ROOT = Path(__file__).resolve().parents[3]
TABLE = json.loads((Path(__file__).parent / "data" / "poptorch_3_4_api.json").read_text())["namespaces"]
SOURCES = [
    *(p for p in (ROOT / "packages/graphcore/src").rglob("*.py") if "_emulator" not in p.parts),
    *(ROOT / "examples/graphcore").rglob("*.py"),
    *(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts),
    ROOT / "packages/graphcore/README.md",
]
TOP = re.compile(r"\bpoptorch(?:\(\))?\.(?!optim\.)([A-Za-z_]\w*)")
OPTIM = re.compile(r"\bpoptorch(?:\(\))?\.optim\.([A-Za-z_]\w*)")
CALL = re.compile(r"\.([A-Za-z_]\w*)\(")
# Names the docs mention as gone, to map them to their successor; neither poptorch 3.4 nor the emulator has them.
REMOVED = {"AnchorMode": "removed in poptorch 2.5 (commit 8e9693eb); OutputMode replaces it"}
EMULATED_CLASSES = {
    "poptorch.Options": _emulator.Options,
    "poptorch.Options.Training": type(_emulator.Options().Training),
    "poptorch.PoplarExecutor": _emulator.PoplarExecutor,
}


def _used(pattern: re.Pattern[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in SOURCES:
        for name in pattern.findall(path.read_text()):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def _parameter_names(params: str) -> list[str]:
    args = ast.parse(f"def f({params}): pass").body[0].args  # type: ignore[attr-defined]
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


def _emulated_parameter_names(obj: Any) -> list[str]:
    signature = inspect.signature(obj)
    return [
        name
        for name, p in signature.parameters.items()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name != "self"
    ]


def test_the_table_was_generated_from_poptorch_3_4() -> None:
    source = json.loads((Path(__file__).parent / "data" / "poptorch_3_4_api.json").read_text())["source"]
    assert "tag sdk/poptorch/3.4.0" in source
    assert {"Options", "trainingModel", "inferenceModel", "OutputMode"} <= TABLE["poptorch"].keys()


@pytest.mark.parametrize(("namespace", "pattern"), [("poptorch", TOP), ("poptorch.optim", OPTIM)])
def test_every_name_we_use_is_poptorch_3_4s_and_the_emulators(namespace: str, pattern: re.Pattern[str]) -> None:
    used = _used(pattern)
    assert used, f"no {namespace} name found: the scan is broken"
    module = _emulator if namespace == "poptorch" else _emulator.optim
    for name in REMOVED:
        assert name not in TABLE[namespace] and not hasattr(module, name)
        used.pop(name, None)
    missing = {name: files for name, files in used.items() if name not in TABLE[namespace]}
    assert not missing, f"not in poptorch 3.4: {missing}"
    not_emulated = {name: files for name, files in used.items() if not hasattr(module, name)}
    assert not not_emulated, f"not in the emulator: {not_emulated}"
    for name in used:
        entry = TABLE[namespace][name]
        if entry["kind"] in ("function", "class") and entry["params"]:
            emulated = _emulated_parameter_names(getattr(module, name))
            real = _parameter_names(entry["params"])
            # The emulator may leave parameters out (IPU-only tuning), never add or reorder them.
            remaining = iter(real)
            in_order = all(any(name_ == other for other in remaining) for name_ in emulated)
            assert in_order, f"{namespace}.{name}: emulator {emulated}, poptorch 3.4 {real}"


def test_every_method_we_call_is_poptorch_3_4s() -> None:
    calls = _used(CALL)
    checked = 0
    for namespace, cls in EMULATED_CLASSES.items():
        for name, files in calls.items():
            if name.startswith("_") or not callable(getattr(cls, name, None)):
                continue
            checked += 1
            assert name in TABLE[namespace], f"{namespace}.{name} (used in {sorted(set(files))}) is not in poptorch 3.4"
    assert checked > 10, "too few methods found: the scan is broken"


def test_the_emulator_exports_no_name_poptorch_3_4_lacks() -> None:
    extra = sorted(set(_emulator.__all__) - set(TABLE["poptorch"]) - {"__version__"})
    assert not extra, f"the emulator exports names poptorch 3.4 does not have: {extra}"
