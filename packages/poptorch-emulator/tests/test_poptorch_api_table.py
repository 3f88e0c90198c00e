"""The emulator has poptorch 3.4's whole public Python API, with 3.4's parameters, or says which names it leaves out.

The table (``data/poptorch_3_4_api.json``) is generated from poptorch's source at tag ``sdk/poptorch/3.4.0`` by
``data/generate_poptorch_api.py``: the module-level names of ``poptorch`` and ``poptorch.optim``, the public
members of ``Options`` and its sub-option classes, ``PoplarExecutor``, the execution strategies, ``DataLoader``
and the optimizers, and the members of every enumeration. The emulator must have each name, every function, method
and class with exactly 3.4's parameter names in 3.4's order, every enumeration member with 3.4's value, and export
nothing 3.4 lacks; a name it cannot reproduce is listed in ``lightning_accel/poptorch_emulator/left_out.py`` with
the reason, and using it raises a ``poptorch.Error`` that names it. The names our own code, examples and docs use must
be real ones.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

from lightning_accel import poptorch_emulator as _emulator
from lightning_accel.poptorch_emulator.left_out import LEFT_OUT

pytestmark = pytest.mark.emulator_only

ROOT = Path(__file__).resolve().parents[3]
DATA = json.loads((Path(__file__).parent / "data" / "poptorch_3_4_api.json").read_text())
TABLE: dict[str, dict[str, Any]] = DATA["namespaces"]
SOURCES = [
    *(ROOT / "packages/graphcore/src").rglob("*.py"),
    *(ROOT / "examples/graphcore").rglob("*.py"),
    *(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts),
    ROOT / "packages/graphcore/README.md",
]
TOP = re.compile(r"\bpoptorch(?:\(\))?\.(?!optim\.)([A-Za-z_]\w*)")
OPTIM = re.compile(r"\bpoptorch(?:\(\))?\.optim\.([A-Za-z_]\w*)")
# Names the docs mention as gone, to map them to their successor; neither poptorch 3.4 nor the emulator has them.
REMOVED = {"AnchorMode": "removed in poptorch 2.5 (commit 8e9693eb); OutputMode replaces it"}


def emulated(namespace: str) -> Any:
    """The emulator's object for a namespace of the table."""
    options = _emulator.Options()
    special = {
        "poptorch": _emulator,
        "poptorch.optim": _emulator.optim,
        "poptorch.Options.Training": type(options.Training),
        "poptorch.Options.Precision": type(options.Precision),
        "poptorch.Options.Distributed": type(options.Distributed),
        "poptorch.Options.TensorLocations": type(options.TensorLocations),
        "poptorch.Options.Jit": type(options.Jit),
        "poptorch.Options._Popart": type(options._Popart),
    }
    if namespace in special:
        return special[namespace]
    target: Any = _emulator
    for part in namespace.split(".")[1:]:
        target = getattr(target, part)
    return target


def qualified(namespace: str, name: str) -> str:
    return f"{namespace}.{name}"


def _parameters(params: str) -> list[str]:
    args = ast.parse(f"def f({params}): pass").body[0].args  # type: ignore[attr-defined]
    names = [a.arg for a in (*args.posonlyargs, *args.args)]
    names += [f"*{args.vararg.arg}"] if args.vararg else []
    names += [a.arg for a in args.kwonlyargs]
    names += [f"**{args.kwarg.arg}"] if args.kwarg else []
    return names


def _emulated_parameters(obj: Any) -> list[str]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    names = []
    for name, p in inspect.signature(target).parameters.items():
        if name in ("self", "cls"):
            continue
        names.append(f"*{name}" if p.kind == p.VAR_POSITIONAL else f"**{name}" if p.kind == p.VAR_KEYWORD else name)
    return names


CASES = [(space, name) for space, names in TABLE.items() for name in names]


def test_the_table_is_poptorch_3_4s_whole_api() -> None:
    assert "tag sdk/poptorch/3.4.0" in DATA["source"]
    assert {"Options", "trainingModel", "isRunningOnIpu", "set_available_memory"} <= TABLE["poptorch"].keys()
    assert {"setAutomaticLossScaling", "gradientAccumulation"} <= TABLE["poptorch.Options.Training"].keys()
    assert {"useIpuModel", "Precision", "inputReplicaGrouping"} <= TABLE["poptorch.Options"].keys()
    assert TABLE["poptorch.OutputMode"]["EveryN"]["value"] == "1"
    assert len(CASES) > 300


def _problem(namespace: str, name: str) -> str | None:
    """What is wrong with the emulator's ``name`` of ``namespace``, or ``None``."""
    entry = TABLE[namespace][name]
    owner = emulated(namespace)
    full = qualified(namespace, name)
    if not hasattr(owner, name):
        return f"{full} is missing (neither emulated nor in left_out.py)"
    if full in LEFT_OUT:
        return None
    value = getattr(owner, name)
    if entry["kind"] == "member":
        if str(value.value) != entry["value"].strip("'\""):
            return f"{full} = {value.value!r}, poptorch 3.4 has {entry['value']}"
    elif entry["kind"] in ("function", "class"):
        if not callable(value):
            return f"{full} is not callable"
        # A class without its own __init__ in poptorch ("") takes its base's parameters: nothing to compare.
        if entry.get("params"):
            want, got = _parameters(entry["params"]), _emulated_parameters(value)
            if got != want:
                return f"{full} takes {got}, poptorch 3.4 takes {want}"
    elif entry["kind"] == "property" and inspect.isclass(owner):
        if not isinstance(inspect.getattr_static(owner, name), property):
            return f"{full} is not a property"
    return None


def test_the_emulator_has_every_name_with_poptorchs_parameters() -> None:
    problems = [problem for space, name in CASES if (problem := _problem(space, name)) is not None]
    assert not problems, "\n".join(problems)


def test_a_left_out_name_is_poptorchs_and_raises_an_error_naming_it() -> None:
    for name, reason in LEFT_OUT.items():
        space, _, attr = name.rpartition(".")
        assert attr in TABLE[space], f"{name} is in left_out.py but not in poptorch 3.4"
        stub = getattr(emulated(space), attr)
        with pytest.raises(_emulator.Error, match=rf"^'poptorch_py_error': {re.escape(name)} is not emulated: "):
            stub(None)
        with pytest.raises(_emulator.Error, match=re.escape(reason)):
            stub.anything  # noqa: B018 - reading any attribute of a left-out module refuses too


def test_the_emulator_exports_no_name_poptorch_3_4_lacks() -> None:
    extra = sorted(set(_emulator.__all__) - set(TABLE["poptorch"]) - {"__version__"})
    assert not extra, f"the emulator exports names poptorch 3.4 does not have: {extra}"
    extra_optim = sorted(set(_emulator.optim.__all__) - set(TABLE["poptorch.optim"]))
    assert not extra_optim, f"the emulator's poptorch.optim exports names poptorch 3.4 does not have: {extra_optim}"


def _used(pattern: re.Pattern[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in SOURCES:
        for name in pattern.findall(path.read_text()):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize(("namespace", "pattern"), [("poptorch", TOP), ("poptorch.optim", OPTIM)])
def test_every_name_our_code_and_docs_use_is_poptorch_3_4s(namespace: str, pattern: re.Pattern[str]) -> None:
    used = _used(pattern)
    assert used, f"no {namespace} name found: the scan is broken"
    for name in REMOVED:
        assert name not in TABLE[namespace]
        used.pop(name, None)
    missing = {name: files for name, files in used.items() if name not in TABLE[namespace]}
    assert not missing, f"not in poptorch 3.4: {missing}"
