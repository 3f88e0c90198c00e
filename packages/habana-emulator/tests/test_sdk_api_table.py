"""The emulator has the Gaudi SDK's public surface: the same modules and names, the same parameters in the same order,
nothing the SDK lacks; what it cannot provide honestly refuses, by name, with the reason.

The table (``data/habana_1_19_api.json``) is generated from gaudi-pytorch-bridge 1.19.0 (the Transformer Engine from
1.18.0, see its ``te_source``) by ``data/generate_habana_api.py``; the not-emulated list is
``lightning_accel.habana_emulator._not_emulated``.
"""

from __future__ import annotations
import __future__

import ast
import importlib
import importlib.util
import inspect
import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _emulator_helpers import PYTHON, script_env

pytestmark = pytest.mark.emulator_only

DATA = Path(__file__).parent / "data"
TABLE: dict[str, dict[str, Any]] = json.loads((DATA / "habana_1_19_api.json").read_text())["modules"]
SDK = "habana_frameworks.torch"
EMULATOR = "lightning_accel.habana_emulator"
TE = f"{SDK}.hpex.experimental.transformer_engine"


def _is_real_module(name: str) -> bool:
    """Whether the emulator has a source file for ``name`` (found without importing its parents)."""
    package = Path(importlib.util.find_spec(EMULATOR).origin).parent  # type: ignore[arg-type]
    path = package.joinpath(*name[len(EMULATOR) :].split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _not_emulated() -> ModuleType:
    return importlib.import_module(f"{EMULATOR}._not_emulated")


def _parameters_of_table(params: str) -> list[str]:
    args = ast.parse(f"def f({params}): pass").body[0].args  # type: ignore[attr-defined]
    names = [a.arg for a in (*args.posonlyargs, *args.args)]
    if args.vararg:
        names.append("*" + args.vararg.arg)
    names += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        names.append("**" + args.kwarg.arg)
    return names


def _parameters_of(obj: Any) -> list[str]:
    names = []
    for name, parameter in inspect.signature(obj).parameters.items():
        prefix = {parameter.VAR_POSITIONAL: "*", parameter.VAR_KEYWORD: "**"}.get(parameter.kind, "")  # type: ignore[call-overload]
        names.append(prefix + name)
    return names


def _public_table_names(module: str, lazy: bool) -> dict[str, dict[str, Any]]:
    return {
        name: entry
        for name, entry in TABLE[module].items()
        if not name.startswith(("_", "*"))
        and entry["kind"] != "all"
        and (lazy or not entry.get("lazy_only"))
        # Bound by the SDK only when a condition holds (a flag, a torch version): checked where it applies.
        and "only_if" not in entry
    }


def _is_extra_candidate(value: Any) -> bool:
    """Whether a public attribute of an emulated module is something a user reads as an SDK name."""
    if isinstance(value, (ModuleType, __future__._Feature)):
        return False
    if isinstance(value, (str, int, float, bool, tuple, list, dict, set, frozenset)) or value is None:
        return True
    return str(getattr(value, "__module__", "") or "").startswith(EMULATOR)


def _is_stand_in(value: Any) -> bool:
    # The value stand-in refuses every attribute, so ask its type first.
    return type(value).__name__ == "_NotEmulatedValue" or hasattr(value, "__not_emulated__")


def _check_module(module: str, lazy: bool) -> list[str]:
    not_emulated = _not_emulated()
    emulated = importlib.import_module(module)
    problems: list[str] = []
    listed = not_emulated.NAMES.get(module, {})
    wanted = _public_table_names(module, lazy)
    for name, entry in wanted.items():
        if not hasattr(emulated, name):
            problems.append(f"{module}.{name}: missing ({entry['kind']})")
            continue
        value = getattr(emulated, name)
        if name in listed or _is_stand_in(value):
            try:
                value()
            except not_emulated.NotEmulatedError as exc:
                if f".{name} is not emulated: " not in str(exc):
                    problems.append(f"{module}.{name}: its refusal does not name it: {exc}")
            else:
                problems.append(f"{module}.{name}: listed as not emulated but does not refuse")
            continue
        if entry["kind"] == "module" and not isinstance(value, ModuleType):
            problems.append(f"{module}.{name}: the SDK's is a module, the emulator's a {type(value).__name__}")
        # A class without its own __init__ has its base's parameters, which the table does not know.
        if entry["kind"] == "function" or (entry["kind"] == "class" and entry.get("params")):
            real = _parameters_of_table(entry["params"])
            try:
                ours = _parameters_of(value)
            except (TypeError, ValueError):
                ours = ["<no signature>"]
            if ours != real:
                problems.append(f"{module}.{name}: parameters {ours}, the SDK's {real}")
        if entry["kind"] == "class" and not isinstance(value, type):
            problems.append(f"{module}.{name}: the SDK's is a class, the emulator's a {type(value).__name__}")
    stale = sorted(set(listed) - set(TABLE[module]))
    problems += [f"{module}.{name}: in the not-emulated list but not an SDK name" for name in stale]
    everything = {n for n in TABLE[module] if not n.startswith("*")}
    for name, value in vars(emulated).items():
        if name.startswith("_") or name in everything or not _is_extra_candidate(value):
            continue
        problems.append(f"{module}.{name}: not an SDK name (the emulator must not have it)")
    return problems


def _emulated_modules() -> list[Any]:
    found = []
    for module in TABLE:
        if not _is_real_module(EMULATOR + module[len(SDK) :]):
            continue  # refused by name, or missing: test_every_sdk_module_is_emulated_or_refused_by_name says which
        found.append(pytest.param(module, id=module))
    return found


def test_the_table_is_bridge_1_19s() -> None:
    source = json.loads((DATA / "habana_1_19_api.json").read_text())
    assert "tag v1.19.0" in source["source"] and "gaudi-pytorch-bridge" in source["source"]
    assert "v1.18.0" in source["te_source"]
    hpu = TABLE[f"{SDK}.hpu"]
    assert {"device", "device_of", "is_bf16_supported", "mem_get_info", "synchronize"} <= hpu.keys()
    assert hpu["synchronize"]["params"] == "" and "reset_max_memory_allocated" not in hpu
    assert hpu["HPUGraph"].get("lazy_only") and not hpu["synchronize"].get("lazy_only")


@pytest.mark.parametrize("module", list(TABLE))
def test_every_sdk_module_is_emulated_or_refused_by_name(module: str) -> None:
    reason = _not_emulated().module_reason(module)
    name = EMULATOR + module[len(SDK) :]
    if _is_real_module(name):
        importlib.import_module(module)
        return
    assert reason is not None, f"{module} is neither emulated nor in the not-emulated list"
    with pytest.raises(_not_emulated().NotEmulatedModuleError) as refused:
        importlib.import_module(module)
    # The refusal names the module, or the package above it whose import refused first.
    named = str(refused.value).partition(" is not emulated: ")[0]
    assert module == named or module.startswith(named + "."), str(refused.value)


@pytest.mark.parametrize("module", _emulated_modules())
def test_an_emulated_module_has_the_sdks_names_and_parameters(module: str, eager_mode: None) -> None:
    problems = _check_module(module, lazy=False)
    assert not problems, "\n".join(problems)


def test_the_hpu_module_in_lazy_mode_has_the_graph_apis_too(lazy_mode: None) -> None:
    problems = _check_module(f"{SDK}.hpu", lazy=True)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("flag", "bound"), [("", "False"), ("0", "False"), ("1", "True")])
def test_compile_backend_binds_enable_compiled_autograd_only_with_its_flag(flag: str, bound: str) -> None:
    # The SDK imports it into compile_backend only to call it when PT_HPU_ENABLE_COMPILED_AUTOGRAD is set
    # (compile_backend/__init__.py:23-26): code that calls compile_backend.enable_compiled_autograd() without the flag
    # meets an AttributeError on Gaudi, so it must here too. The function itself lives in compile_backend.experimental.
    entry = TABLE[f"{SDK}.dynamo.compile_backend"]["enable_compiled_autograd"]
    assert entry["only_if"] == "bc.get_pt_hpu_enable_compiled_autograd()"
    code = (
        f"import {SDK}.dynamo.compile_backend as backend, {SDK}.dynamo.compile_backend.experimental as experimental\n"
        "print(hasattr(backend, 'enable_compiled_autograd'), callable(experimental.enable_compiled_autograd))\n"
    )
    env = script_env(PT_HPU_ENABLE_COMPILED_AUTOGRAD=flag)
    done = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.split()[-2:] == [bound, "True"], done.stderr[-2000:]


def test_the_emulator_has_no_module_the_sdk_lacks() -> None:
    import pkgutil

    package = importlib.import_module(EMULATOR)
    extra = []
    for info in pkgutil.walk_packages(package.__path__, EMULATOR + "."):
        relative = info.name[len(EMULATOR) :]
        if any(part.startswith("_") for part in relative.split(".") if part):
            continue
        sdk_name = SDK + relative
        # A package of the SDK without an __init__.py (a namespace package) is not in the table but is importable.
        namespace = any(module.startswith(sdk_name + ".") for module in TABLE)
        if sdk_name not in TABLE and not namespace:
            extra.append(sdk_name)
    assert not extra, f"the emulator has modules the SDK does not: {extra}"


def test_a_not_emulated_name_refuses_by_name_not_with_attribute_error() -> None:
    import habana_frameworks.torch.hpu as hpu

    with pytest.raises(
        NotImplementedError, match=r"habana_frameworks[.]torch[.]hpu[.]enable_dynamic_shape is not emulated"
    ):
        hpu.enable_dynamic_shape()
    with pytest.raises(
        ImportError, match=r"habana_frameworks[.]torch[.]hpex[.]kernels[.]CTCLoss is not emulated: a fused Gaudi"
    ):
        importlib.import_module("habana_frameworks.torch.hpex.kernels.CTCLoss")
