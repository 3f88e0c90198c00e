"""Every private Lightning name lightning-accel touches is declared in ``compat`` and present in this Lightning.

The per-name test ids name each checked name and tree (``pytest -v`` lists them); the run's summary lists the names
with the installed Lightning version (see ``conftest.py``). An upgrade that moves or changes one fails its test with
the name, where it was declared, what changed and which of our modules use it.
"""

from __future__ import annotations

import ast
import importlib.util
from importlib.metadata import version
from pathlib import Path

import pytest

from lightning_accel.core.compat import PRIVATE_NAMES, Flavour, PrivateName, check_private_name

CHECKED: list[tuple[str, str, str | None]] = []  # (tree, name, problem), read by conftest's summary

FLAVOURS: list[Flavour] = ["lightning"]
if importlib.util.find_spec("pytorch_lightning") is not None:
    FLAVOURS.append("pytorch_lightning")

CASES = [(declared, flavour) for declared in PRIVATE_NAMES for flavour in FLAVOURS]


@pytest.mark.parametrize(("declared", "flavour"), CASES, ids=[f"{f}:{d.qualified()}" for d, f in CASES])
def test_declared_private_name_exists(declared: PrivateName, flavour: Flavour) -> None:
    problem = check_private_name(declared, flavour)
    CHECKED.append((flavour, declared.qualified(flavour), problem))
    assert problem is None, (
        f"Lightning {version('lightning')} changed a private name that lightning-accel uses ({declared.use}): "
        f"{problem}. "
        f"Update lightning_accel.core.compat.PRIVATE_NAMES and its users: {', '.join(declared.users)}."
    )


def test_declarations_are_unique() -> None:
    keys = [(d.owner, d.name) for d in PRIVATE_NAMES]
    assert len(keys) == len(set(keys)), [key for key in keys if keys.count(key) > 1]


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (
            PrivateName("lightning.fabric.connector:_Connector", "_choose_strategy_v2", "method", None, "wrapped", ()),
            "lightning.fabric.connector:_Connector._choose_strategy_v2: no longer exists",
        ),
        (
            PrivateName(
                "lightning.fabric.connector:_Connector", "_choose_strategy", "method", ("self", "x"), "wrapped", ()
            ),
            "parameters are now ('self',), declared ('self', 'x')",
        ),
        (
            PrivateName("lightning.fabric.connector:_Gone", "_choose_strategy", "method", None, "wrapped", ()),
            "class '_Gone' no longer exists",
        ),
        (
            PrivateName(
                "lightning.pytorch.strategies:Strategy", "_precision_plugin_v2", "instance_attribute", None, "read", ()
            ),
            "no longer sets the attribute '_precision_plugin_v2'",
        ),
        (
            PrivateName("lightning.fabric.no_such_module", "_x", "function", None, "called", ()),
            "module 'lightning.fabric.no_such_module' cannot be imported",
        ),
        (PrivateName("lightning.fabric.utilities.types", "_PATH", "class", None, "imported", ()), "not a class"),
    ],
    ids=["missing-method", "changed-signature", "missing-class", "missing-attribute", "missing-module", "kind"],
)
def test_a_moved_name_is_reported_with_its_name(declared: PrivateName, expected: str) -> None:
    problem = check_private_name(declared)
    assert problem is not None and expected in problem


# --- every private Lightning name used in our sources is declared ---

REPO = Path(__file__).resolve().parents[3]
# Our own names that happen to equal a private name somewhere in Lightning (not inherited from or used on Lightning).
OURS = {
    "_device": "lightning_accel.habana._devices' own device record",
    "_enabled": "a helper function of lightning_accel.deepspeed_hpu.config",
    "_executor": "IPUStrategy's own compiled poptorch executors",
    "_global_rank": "a helper function of lightning_accel.core.emulation",
    "_get": "a helper function of lightning_accel.habana.optimum._deepspeed",
    "_initialize_engine": "HPUDeepSpeedStrategy's own (only Fabric's DeepSpeedStrategy has one)",
    "_load": "a helper function of lightning_accel.core.discovery",
    "_local_rank": "Intel Neural Compressor's cached rank, read again by lightning_accel.habana._fp8_inference",
    "_module": "a helper function of the habana SDK seam",
    "_result": "a helper function of lightning_accel.core.selftest.runner",
    "_registered_strategies": "HPUDeepSpeedStrategy's own list (Lightning's FSDP convention, declared on our class)",
    "_step": "IPUStrategy's own step helper",
    "_strategy": "a helper function of lightning_accel.deepspeed_hpu.plugin",
    "_world_size": "Intel Neural Compressor's cached world size, read again by lightning_accel.habana._fp8_inference",
    "_trainer": "IPUStrategy's own attribute (LightningModule._trainer, read by deepspeed-hpu, is declared)",
    "_unwrap": "a helper function of lightning_accel.habana.graphs",
    "_records": "a helper function of lightning_accel.habana.compilation (Dynamo's compilation records)",
    "_name": "a method of lightning_accel.habana.compile_metrics' own record keeper",
    "_logger": "a helper function of lightning_accel.habana.optimum's importer",
    "_model": "a helper function of lightning_accel.habana.optimum's importer",
    "_parser": "a helper function of lightning_accel.habana.preflight's command line",
    "_forward_pre_hooks": "torch.nn.Module's hook table, read (as poptorch's removeBlocks does) to find BeginBlocks",
    "_capture": "a method of lightning_accel.habana's fast_ddp GradientFusion (captures one HPU graph)",
    "_version": "torch.Tensor's version counter, read by fast_ddp to see whether backward wrote a gradient",
}
# The SDK emulators (they stand in for the SDKs and use no Lightning), the core's test kit, the generated twins.
SKIPPED_DIRS = {"habana_emulator", "poptorch_emulator", "testing", "twins"}


def _lightning_private_names() -> set[str]:
    """Private names Lightning defines: functions, classes, module attributes and `self.<name>` assignments."""
    import lightning

    names: set[str] = set()
    root = Path(lightning.__file__).parent
    for path in [*(root / "pytorch").rglob("*.py"), *(root / "fabric").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _our_sources() -> list[Path]:
    sources = sorted(REPO.glob("packages/*/src/lightning_accel/**/*.py"))
    return [path for path in sources if not SKIPPED_DIRS.intersection(path.parts)]


@pytest.mark.skipif(not (REPO / "packages").is_dir(), reason="needs the monorepo's sources")
def test_every_private_lightning_name_in_our_sources_is_declared() -> None:
    lightning_names = _lightning_private_names()
    declared = {d.name for d in PRIVATE_NAMES}
    undeclared: dict[str, list[str]] = {}
    direct_imports: list[str] = []
    for path in _our_sources():
        where = path.relative_to(REPO)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            used = None
            if isinstance(node, ast.Attribute):
                used = node.attr
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                used = node.name
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("lightning.", "pytorch_")):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private and path.name != "compat.py":
                    direct_imports.append(f"{where}:{node.lineno} imports {', '.join(private)} from {node.module}")
            if used and used in lightning_names and used not in declared and used not in OURS:
                undeclared.setdefault(used, []).append(f"{where}:{node.lineno}")
    assert not direct_imports, f"import private Lightning names through lightning_accel.core.compat: {direct_imports}"
    assert not undeclared, (
        "private Lightning names used but not declared in lightning_accel.core.compat.PRIVATE_NAMES (declare them, "
        f"or add them to OURS with a reason if they are our own): {undeclared}"
    )
    stale = sorted(set(OURS) - {n for n in lightning_names})
    assert not stale, f"OURS lists names Lightning no longer defines; remove them: {stale}"
