"""A static check that every torch name our Gaudi packages use exists in every torch version we support.

Gaudi users run the torch of their Intel Gaudi software, which we cannot install beside the emulated device, so the
check reads torch's sources instead of importing them:

- :func:`collect` reads our packages with :mod:`ast` and lists every dotted torch name they use, with where;
- :func:`resolve` decides from one wheel's ``.py`` and ``.pyi`` files whether a name exists there (``None`` when it
  cannot be decided statically);
- ``python tools/torch_names.py generate`` downloads (or reuses) the wheel of every :data:`SUPPORTED_TORCH` version,
  resolves every name in each and writes ``tools/data/torch_names.json``;
- ``python tools/torch_names.py check`` (and ``tests/test_torch_names.py``) compare that record with what our packages
  use now, without any download: every name must exist in every version or be listed in :data:`ALLOWED`.

Only names are checked: keyword arguments, signatures and behaviour are not.

Example:
    >>> sorted(collect_source("import torch.distributed as dist; dist.all_reduce(x)", "m.py"))
    ['torch.distributed', 'torch.distributed.all_reduce']
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ALLOWED",
    "DATA",
    "PACKAGES",
    "ROOT",
    "SUPPORTED_TORCH",
    "WheelSources",
    "check",
    "collect",
    "collect_source",
    "coverage_errors",
    "generate",
    "presence_errors",
    "resolve",
    "version_errors",
    "wheel",
    "write",
]

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tools" / "data" / "torch_names.json"
CACHE = Path.home() / ".cache" / "lightning-accel" / "torch-wheels"
GENERATE = "python tools/torch_names.py generate"


def _declared_torch_versions() -> dict[str, str]:
    path = ROOT / "packages" / "habana" / "src" / "lightning_accel" / "habana" / "versions.py"
    spec = importlib.util.spec_from_file_location("_habana_versions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.SUPPORTED_TORCH)


#: Every torch version the Gaudi packages (habana, deepspeed-hpu, core) support, and why: the table the habana package
#: declares (lightning_accel.habana.versions), read from its file without importing the package (which imports torch).
SUPPORTED_TORCH: dict[str, str] = _declared_torch_versions()

#: The source folders whose torch names are checked (relative to the repository root).
PACKAGES = ["packages/habana/src", "packages/deepspeed-hpu/src", "packages/core/src"]

#: Names that are absent (false) or undecidable (null) in some supported version, each with why that is fine.
ALLOWED: dict[str, str] = {}

Presence = bool | None


# --------------------------------------------------------------------------------------------------------------------
# collect: the torch names our sources use


class _Uses(ast.NodeVisitor):
    """Records every dotted torch name of one module: imports, and attribute chains rooted at a torch alias."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.aliases: dict[str, str] = {}  # local name -> the dotted torch name it is bound to
        self.found: dict[str, set[tuple[str, int]]] = {}

    def record(self, name: str, line: int) -> None:
        if name != "torch":  # the package itself exists in every version
            self.found.setdefault(name, set()).add((self.where, line))

    def bind_imports(self, tree: ast.AST) -> None:
        # One flat scope per module: our sources bind a torch alias once per name, wherever the import is.
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "torch" or alias.name.startswith("torch."):
                        self.record(alias.name, node.lineno)
                        if alias.asname:
                            self.aliases[alias.asname] = alias.name
                        else:
                            self.aliases["torch"] = "torch"
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "torch" or node.module.startswith("torch."):
                    for alias in node.names:
                        if alias.name == "*":
                            self.record(node.module, node.lineno)
                            continue
                        dotted = f"{node.module}.{alias.name}"
                        self.record(dotted, node.lineno)
                        self.aliases[alias.asname or alias.name] = dotted

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parts: list[str] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in self.aliases:
            self.record(".".join([self.aliases[base.id], *reversed(parts)]), node.lineno)
        else:
            # A chain rooted at a call, a subscript or a value: only what is inside it can name torch.
            self.visit(base)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.aliases and isinstance(node.ctx, ast.Load):
            self.record(self.aliases[node.id], node.lineno)


def collect_source(text: str, where: str) -> dict[str, list[str]]:
    """The torch names one module's source uses.

    Args:
        text: the module's source.
        where: the path to report (``path:line`` is recorded for each use).

    Returns:
        Each dotted torch name (``torch.distributed.all_reduce``) -> where it is used, in order.
    """
    tree = ast.parse(text, filename=where)
    uses = _Uses(where)
    uses.bind_imports(tree)
    uses.visit(tree)
    return {name: [f"{path}:{line}" for path, line in sorted(spots)] for name, spots in uses.found.items()}


def _python_files(root: Path, paths: Iterable[str | Path]) -> Iterator[Path]:
    for path in paths:
        full = root / path
        yield from [full] if full.is_file() else sorted(full.rglob("*.py"))


def _location_key(location: str) -> tuple[str, int]:
    path, _, line = location.rpartition(":")
    return path, int(line)


def collect(root: Path, paths: Iterable[str | Path] = PACKAGES) -> dict[str, list[str]]:
    """Every dotted torch name the Python files under ``paths`` use, read with :mod:`ast` (nothing is imported).

    Args:
        root: the repository root; locations are reported relative to it.
        paths: folders (searched for ``*.py``) or files, relative to ``root``.

    Returns:
        Each name -> its ``path:line`` locations, sorted; names sorted.
    """
    names: dict[str, list[str]] = {}
    for file in _python_files(root, paths):
        where = file.relative_to(root).as_posix()
        for name, spots in collect_source(file.read_text(encoding="utf-8"), where).items():
            names.setdefault(name, []).extend(spots)
    return {name: sorted(names[name], key=_location_key) for name in sorted(names)}


# --------------------------------------------------------------------------------------------------------------------
# resolve: does a name exist in one torch's sources


@dataclass
class _Module:
    """What a module binds at its top level, as far as its source tells."""

    bindings: dict[str, list[ast.stmt]] = field(default_factory=dict)
    stars: list[str] = field(default_factory=list)  # absolute module names of its `from X import *`
    all_known: set[str] = field(default_factory=set)  # the names its __all__ lists literally
    all_complete: bool = False  # it has an __all__ and every part of it is literal
    dynamic: bool = False  # defines __getattr__ or writes globals(): a missing name may still exist at run time

    @property
    def all_names(self) -> set[str] | None:
        """Its ``__all__`` when known in full, else None."""
        return self.all_known if self.all_complete else None


def _nested_blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    # Statements that run at the level they are written at: names bound in if/try/with/loops count too.
    if isinstance(node, ast.If | ast.For | ast.While):
        return [node.body, node.orelse]
    if isinstance(node, ast.With):
        return [node.body]
    if isinstance(node, ast.Try | ast.TryStar):
        return [node.body, node.orelse, node.finalbody, *[handler.body for handler in node.handlers]]
    return []


def _flat(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        yield node
        for block in _nested_blocks(node):
            yield from _flat(block)


def _targets(node: ast.stmt) -> list[str]:
    """The names a statement binds (imports aside)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [name.id for target in node.targets for name in ast.walk(target) if isinstance(name, ast.Name)]
    if isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _writes_globals(node: ast.stmt) -> bool:
    for child in ast.walk(node):
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "globals":
            return True
    return False


def _extends_all(node: ast.stmt) -> bool:
    """``__all__.extend(...)`` / ``__all__.append(...)``."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    function = node.value.func
    return isinstance(function, ast.Attribute) and _dotted_expr(function.value) == "__all__"


def _literal_all(node: ast.stmt) -> set[str] | None:
    """The names one statement adds to ``__all__``, or None when they are not literal."""
    value: ast.expr | None = None
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        value = node.value
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and len(node.value.args) == 1:
        value = node.value.args[0]
        if isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "append":
            value = ast.List(elts=[value], ctx=ast.Load())
    if value is None:
        return None
    try:
        literal = ast.literal_eval(value)
    except ValueError:
        return None
    if isinstance(literal, list | tuple | set) and all(isinstance(item, str) for item in literal):
        return set(literal)
    return None


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of ``from <level dots><target> import ...`` written in ``module``."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


class _Resolver:
    """Resolves dotted names against one torch's sources, parsing each module once."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self.sources = sources
        self.modules: dict[str, list[tuple[_Module, bool]]] = {}

    def files(self, module: str) -> list[str]:
        path = module.replace(".", "/")
        candidates = [f"{path}.py", f"{path}.pyi", f"{path}/__init__.py", f"{path}/__init__.pyi"]
        return [candidate for candidate in candidates if candidate in self.sources]

    def module(self, name: str) -> list[tuple[_Module, bool]]:
        """The parsed files of module ``name`` (its .py and its .pyi stub), each with whether it is a package."""
        if name not in self.modules:
            packages = [(file, file.endswith(("/__init__.py", "/__init__.pyi"))) for file in self.files(name)]
            self.modules[name] = [(self.parse(name, file, is_package), is_package) for file, is_package in packages]
        return self.modules[name]

    def parse(self, name: str, file: str, is_package: bool) -> _Module:
        module = _Module()
        all_parts: list[set[str] | None] = []
        for node in _flat(ast.parse(self.sources[file], filename=file).body):
            for target in _targets(node):
                module.bindings.setdefault(target, []).append(node)
            if "__all__" in _targets(node) or _extends_all(node):
                all_parts.append(_literal_all(node))
            if isinstance(node, ast.Import | ast.ImportFrom):
                self.bind_import(module, node, name, is_package)
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                module.dynamic = True
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and _writes_globals(node):
                module.dynamic = True
        module.all_known = set().union(*[part for part in all_parts if part is not None])
        module.all_complete = bool(all_parts) and all(part is not None for part in all_parts)
        return module

    @staticmethod
    def bind_import(module: _Module, node: ast.Import | ast.ImportFrom, name: str, is_package: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                module.bindings.setdefault(bound, []).append(node)
            return
        source = _absolute(name, is_package, node.level, node.module)
        for alias in node.names:
            if alias.name == "*":
                module.stars.append(source)
            else:
                module.bindings.setdefault(alias.asname or alias.name, []).append(node)

    def dotted(self, name: str, seen: frozenset[str] = frozenset()) -> Presence:
        """Whether ``name`` exists: the longest prefix that is a module, then its attributes."""
        if name in seen:  # an import cycle: this path binds nothing new
            return False
        seen = seen | {name}
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            if self.files(".".join(parts[:cut])):
                return self.in_module(".".join(parts[:cut]), parts[cut:], seen)
        return None if parts[0] != "torch" else False

    def in_module(self, module: str, parts: list[str], seen: frozenset[str]) -> Presence:
        if not parts:
            return True
        results = [self.in_file(parsed, module, parts, seen) for parsed, _ in self.module(module)]
        return _any(results)

    def in_file(self, parsed: _Module, module: str, parts: list[str], seen: frozenset[str]) -> Presence:
        head, rest = parts[0], parts[1:]
        results = [self.through(node, module, head, rest, seen) for node in parsed.bindings.get(head, [])]
        for star in parsed.stars:
            if not head.startswith("_") or (head in (self.all_of(star) or ())):
                results.append(self.from_star(star, parts, seen))
        if head in parsed.all_known and head not in parsed.bindings:
            results.append(True if not rest else None)  # promised by __all__, bound some way we cannot see
        if parsed.dynamic and not any(result is True for result in results):
            results.append(None)
        return _any(results)

    def all_of(self, module: str) -> set[str] | None:
        names = [parsed.all_names for parsed, _ in self.module(module) if parsed.all_names is not None]
        return set().union(*names) if names else None

    def from_star(self, star: str, parts: list[str], seen: frozenset[str]) -> Presence:
        if not self.files(star):
            return None  # a C extension without a stub, or a module outside torch: its names are unknown here
        exported = self.all_of(star)
        if exported is not None and parts[0] not in exported:
            return False
        return self.dotted(".".join([star, *parts]), seen)

    def through(self, node: ast.stmt, module: str, head: str, rest: list[str], seen: frozenset[str]) -> Presence:
        """Whether ``head.rest`` exists, ``head`` being bound by ``node`` in ``module``."""
        if not rest:
            return True
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == head:
                    return self.dotted(".".join([alias.name, *rest]), seen)
                if alias.asname is None and alias.name.split(".")[0] == head:
                    return self.dotted(".".join([head, *rest]), seen)
            return None
        if isinstance(node, ast.ImportFrom):
            is_package = any(package for _, package in self.module(module))
            source = _absolute(module, is_package, node.level, node.module)
            original = next(alias.name for alias in node.names if (alias.asname or alias.name) == head)
            return self.dotted(".".join([source, original, *rest]), seen)
        if isinstance(node, ast.ClassDef):
            return self.in_class(node, module, rest, seen)
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            return self.through_value(node.value, module, rest, seen)
        return None  # an attribute of a function or of a value

    def through_value(self, value: ast.expr, module: str, rest: list[str], seen: frozenset[str]) -> Presence:
        # `Alias = Name` or `Alias = package.Name`: the attribute is the aliased object's.
        builtin = _builtin_type(value)
        if builtin is not None:
            # A dict / list / set / str... built right there: its attributes are the builtin type's.
            return hasattr(builtin, rest[0]) if len(rest) == 1 else None
        dotted = _dotted_expr(value)
        if dotted is None:
            return None
        return self.dotted(".".join([module, dotted, *rest]), seen)

    def in_class(self, node: ast.ClassDef, module: str, parts: list[str], seen: frozenset[str]) -> Presence:
        if not parts:
            return True
        head, rest = parts[0], parts[1:]
        # Past a method or a class attribute's value, the attribute is not read from source: None.
        results = [
            self.in_class(child, module, rest, seen) if isinstance(child, ast.ClassDef) else (None if rest else True)
            for child in _flat(node.body)
            if head in _targets(child)
        ]
        if not any(result is True for result in results):
            if any(isinstance(child, ast.FunctionDef) and child.name == "__getattr__" for child in node.body):
                results.append(None)
            elif node.bases or node.keywords:
                results.append(self.in_bases(node, module, parts, seen))
        return _any(results)

    def in_bases(self, node: ast.ClassDef, module: str, parts: list[str], seen: frozenset[str]) -> Presence:
        """Whether a base class (or the metaclass, for an attribute read on the class) has ``parts``."""
        key = f"class {module}:{node.name}:{node.lineno}"
        if key in seen:  # `class Foo(Foo)` over an imported Foo, or a cycle
            return None
        seen = seen | {key}
        metaclasses = [keyword.value for keyword in node.keywords if keyword.arg == "metaclass"]
        results: list[Presence] = []
        for base in [*node.bases, *metaclasses]:
            name = _dotted_expr(base)
            if name == "object":
                results.append(None if parts[0].startswith("__") else False)
                continue
            found = self.class_defs(module, name, seen) if name and "." not in name else None
            if found is None:
                results.append(None)  # a base we cannot read: outside torch, a C class, a subscript
                continue
            results += [self.in_class(base_node, base_module, parts, seen) for base_node, base_module in found]
        return _any(results)

    def class_defs(self, module: str, name: str, seen: frozenset[str]) -> list[tuple[ast.ClassDef, str]] | None:
        """The class definitions ``name`` is bound to in ``module``, or None if any binding is not one we can read."""
        key = f"classdef {module}:{name}"
        if key in seen:
            return None
        seen = seen | {key}
        found: list[tuple[ast.ClassDef, str]] = []
        for parsed, is_package in self.module(module):
            for node in parsed.bindings.get(name, []):
                if isinstance(node, ast.ClassDef):
                    found.append((node, module))
                    continue
                if not isinstance(node, ast.ImportFrom):
                    return None
                source = _absolute(module, is_package, node.level, node.module)
                original = next(alias.name for alias in node.names if (alias.asname or alias.name) == name)
                imported = self.class_defs(source, original, seen)
                if imported is None:
                    return None
                found += imported
        return found or None


_BUILTIN_CALLS: dict[str, type] = {"dict": dict, "list": list, "set": set, "tuple": tuple, "frozenset": frozenset}
_LITERALS: dict[type[ast.expr], type] = {ast.Dict: dict, ast.List: list, ast.Set: set, ast.Tuple: tuple}


def _builtin_type(value: ast.expr) -> type | None:
    """The builtin type of a literal or of ``dict()``-like call, else None."""
    if type(value) in _LITERALS:
        return _LITERALS[type(value)]
    if isinstance(value, ast.Constant) and value.value is not None:
        return type(value.value)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return _BUILTIN_CALLS.get(value.func.id)
    return None


def _dotted_expr(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _any(results: Iterable[Presence]) -> Presence:
    """True if any path binds the name, else None if any path cannot tell, else False."""
    found = list(results)
    if any(result is True for result in found):
        return True
    return None if any(result is None for result in found) else False


def resolve(sources: Mapping[str, str], name: str) -> Presence:
    """Whether the dotted ``name`` exists in one torch's sources, read statically.

    The longest prefix of ``name`` that is a module (``torch/a/b.py``, ``torch/a/b/__init__.py`` or their ``.pyi``)
    is looked up; the next part must be bound at that module's top level (a def, a class, an assignment, an import,
    in ``if``/``try`` blocks too, a star import followed within the sources, or an ``__all__`` entry); re-exports are
    followed to the module that defines the name; further parts are looked up in a class body, then in its base
    classes and metaclass when the sources define them.

    Args:
        sources: file path inside the wheel (``torch/nn/functional.py``) -> its text.
        name: a dotted name, ``torch.nn.functional.scaled_dot_product_attention``.

    Returns:
        True if it exists, False if it provably does not, None if it cannot be decided statically (the module
        defines ``__getattr__`` or writes ``globals()``, an attribute a class may inherit, a star import of a module
        without source, an attribute of a function or a value).
    """
    return _Resolver(sources).dotted(name)


# --------------------------------------------------------------------------------------------------------------------
# the wheels


class WheelSources(Mapping[str, str]):
    """A wheel's ``torch/**/*.py`` and ``*.pyi`` files (path -> text), read from the zip on demand."""

    def __init__(self, wheel: Path) -> None:
        self.zip = zipfile.ZipFile(wheel)
        self.names = {
            name for name in self.zip.namelist() if name.startswith("torch/") and name.endswith((".py", ".pyi"))
        }

    def __getitem__(self, name: str) -> str:
        if name not in self.names:
            raise KeyError(name)
        return self.zip.read(name).decode("utf-8")

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.names))

    def __len__(self) -> int:
        return len(self.names)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel(version: str, cache: Path = CACHE) -> Path:
    """The torch wheel of ``version`` for this interpreter, downloaded with pip unless already cached."""
    folder = cache / version
    found = sorted(folder.glob(f"torch-{version}[-+]*.whl"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", f"torch=={version}", "--no-deps", "--dest", str(folder)]
        subprocess.run(pip, check=True)
        found = sorted(folder.glob(f"torch-{version}[-+]*.whl"))
    if len(found) != 1:
        raise RuntimeError(f"expected one torch {version} wheel in {folder}, found {[path.name for path in found]}")
    return found[0]


def generate(versions: Iterable[str] = SUPPORTED_TORCH, root: Path = ROOT, cache: Path = CACHE) -> dict[str, Any]:
    """The record ``tools/data/torch_names.json`` holds: our names and whether each exists in each version.

    Args:
        versions: the torch versions to check (downloads the wheels not in ``cache``).
        root: the repository root whose :data:`PACKAGES` are read.
        cache: where the wheels are kept, one folder per version.
    """
    used = collect(root, PACKAGES)
    record: dict[str, Any] = {"generator": "tools/torch_names.py", "versions": {}, "names": {}}
    present: dict[str, dict[str, Presence]] = {name: {} for name in used}
    for version in versions:
        path = wheel(version, cache)
        record["versions"][version] = {"wheel": path.name, "sha256": _sha256(path)}
        resolver = _Resolver(WheelSources(path))
        for name in used:
            present[name][version] = resolver.dotted(name)
    record["names"] = {name: {"used_at": used[name], "present": present[name]} for name in used}
    return record


def write(record: Mapping[str, Any], path: Path = DATA) -> None:
    """Write ``record`` as sorted, indented JSON, atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide the record from other users of the checkout
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------------------------------------
# check: the record against what our packages use now


def _where(locations: list[str]) -> str:
    shown = ", ".join(locations[:3])
    return shown if len(locations) <= 3 else f"{shown} and {len(locations) - 3} more"


def _torch(version: str, supported: Mapping[str, str]) -> str:
    return f"torch {version} ({supported[version]})" if version in supported else f"torch {version}"


def version_errors(record: Mapping[str, Any], supported: Mapping[str, str] = SUPPORTED_TORCH) -> list[str]:
    """The record must cover exactly the supported torch versions."""
    recorded, wanted = set(record.get("versions", {})), set(supported)
    if recorded == wanted:
        return []
    return [
        f"tools/data/torch_names.json checks torch {sorted(recorded)} but SUPPORTED_TORCH lists {sorted(wanted)}: "
        f"run `{GENERATE}`."
    ]


def coverage_errors(record: Mapping[str, Any], used: Mapping[str, list[str]]) -> list[str]:
    """The record must hold exactly the names our packages use now."""
    recorded = record.get("names", {})
    errors = [
        f"{name} (used at {_where(used[name])}) is not in tools/data/torch_names.json: run `{GENERATE}`."
        for name in sorted(set(used) - set(recorded))
    ]
    errors += [
        f"{name} is in tools/data/torch_names.json but our packages no longer use it: run `{GENERATE}`."
        for name in sorted(set(recorded) - set(used))
    ]
    return errors


def presence_errors(
    record: Mapping[str, Any],
    used: Mapping[str, list[str]],
    supported: Mapping[str, str] = SUPPORTED_TORCH,
    allowed: Mapping[str, str] = ALLOWED,
) -> list[str]:
    """Every name must exist in every version, or be listed in ``allowed``; no ``allowed`` entry may be stale."""
    errors = []
    names: Mapping[str, Any] = record.get("names", {})
    for name in sorted(names):
        where = _where(used.get(name) or names[name].get("used_at", []))
        for version in sorted(names[name]["present"], key=_version_key):
            present = names[name]["present"][version]
            if present is True or name in allowed:
                continue
            if present is False:
                errors.append(
                    f"{name} (used at {where}) does not exist in {_torch(version, supported)}. Use a name every "
                    "supported torch has, or guard it with a version check and list it in ALLOWED with the reason, "
                    f"then run `{GENERATE}`."
                )
            else:
                errors.append(
                    f"{name} (used at {where}) cannot be decided statically in {_torch(version, supported)} (a "
                    "dynamic module or an inherited attribute). Check it by hand and list it in ALLOWED with the "
                    f"reason, or teach resolve() to decide it, then run `{GENERATE}`."
                )
    for name in sorted(allowed):
        if name not in names:
            errors.append(f"ALLOWED lists {name}, which our packages no longer use: remove it from ALLOWED.")
        elif all(present is True for present in names[name]["present"].values()):
            errors.append(f"ALLOWED lists {name}, which every supported torch now has: remove it from ALLOWED.")
    return errors


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def check(record: Mapping[str, Any], used: Mapping[str, list[str]]) -> list[str]:
    """Every error of the record against the names our packages use now (empty when all is well)."""
    return version_errors(record) + coverage_errors(record, used) + presence_errors(record, used)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["generate", "check"])
    parser.add_argument("--cache", type=Path, default=CACHE, help="generate: where the torch wheels are kept")
    args = parser.parse_args(argv)
    if args.what == "generate":
        write(generate(SUPPORTED_TORCH, ROOT, args.cache))
    if not DATA.exists():
        print(f"{DATA.relative_to(ROOT)} is missing: run `{GENERATE}`.", file=sys.stderr)
        return 1
    errors = check(json.loads(DATA.read_text(encoding="utf-8")), collect(ROOT, PACKAGES))
    for error in errors:
        print(error, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
