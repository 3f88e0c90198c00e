"""The emulator is a layer below the Lightning integration: it imports torch, the standard library and
lightning-accel-core, never lightning-accel-habana (nor any other vendor package)."""

from __future__ import annotations

import ast
from pathlib import Path

import lightning_accel.habana_emulator

PACKAGE = Path(lightning_accel.habana_emulator.__file__).parent
# Its own packages (the device's C++ build lives in lightning_accel.emulated_hpu) and the core.
ALLOWED = ("lightning_accel.core", "lightning_accel.habana_emulator", "lightning_accel.emulated_hpu")


def _absolute_imports() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
    return found


def test_the_emulator_imports_only_the_core_of_lightning_accel() -> None:
    ours = {name: files for name, files in _absolute_imports().items() if name.startswith("lightning_accel.")}
    outside = {
        name: files
        for name, files in ours.items()
        if not name.startswith(
            ("lightning_accel.core", "lightning_accel.habana_emulator", "lightning_accel.emulated_hpu")
        )
    }
    assert not outside, f"the emulator imports the layer above it: {outside}"


def test_the_emulator_imports_no_lightning() -> None:
    lightning = {
        name: files
        for name, files in _absolute_imports().items()
        if name.split(".")[0] in {"lightning", "pytorch_lightning", "lightning_fabric"}
    }
    assert not lightning, f"the emulator imports Lightning: {lightning}"
