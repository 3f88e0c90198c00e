"""The emulator is a layer below the Lightning integration: it imports torch, the standard library and
lightning-accel-core, never lightning-accel-graphcore nor Lightning; the integration reaches it only as ``poptorch``."""

from __future__ import annotations

import ast
from pathlib import Path

import lightning_accel.poptorch_emulator

PACKAGE = Path(lightning_accel.poptorch_emulator.__file__).parent
INTEGRATION = Path(__file__).resolve().parents[2] / "graphcore" / "src"


def _absolute_imports(root: Path) -> dict[str, list[str]]:
    """Module name -> the files under ``root`` that import it (``from lightning_accel import x`` counts as ``x``)."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for name in names:
                found.setdefault(name, []).append(str(path.relative_to(root)))
    return found


def test_the_emulator_imports_only_the_core_of_lightning_accel_and_no_lightning() -> None:
    imports = _absolute_imports(PACKAGE)
    ours = {name: files for name, files in imports.items() if name.startswith("lightning_accel.")}
    outside = {
        name: files
        for name, files in ours.items()
        if not name.startswith(("lightning_accel.core", "lightning_accel.poptorch_emulator"))
    }
    assert not outside, f"the emulator imports the layer above it: {outside}"
    trees = {"lightning", "pytorch_lightning", "lightning_fabric"}
    lightning = [name for name in imports if name.split(".")[0] in trees]
    assert not lightning, f"the emulator imports Lightning: {lightning}"


def test_the_integration_never_names_the_emulator() -> None:
    # Not by an import, nor by a module name handed to importlib: it imports `poptorch`, whatever answers that name.
    named = sorted(
        str(path.relative_to(INTEGRATION))
        for path in INTEGRATION.rglob("*.py")
        if "poptorch_emulator" in path.read_text(encoding="utf-8")
    )
    assert not named, f"lightning-accel-graphcore names its emulator in {named}"
    assert not [name for name in _absolute_imports(INTEGRATION) if "poptorch_emulator" in name]
