"""Source rewriting for twins, and the static check of which modules need a twin."""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import lru_cache
from pathlib import Path

__all__ = ["depends_on_lightning", "rewrite_imports"]

# Only module paths in import statements are rewritten; string literals and attribute chains are left alone.
_IMPORT = re.compile(
    r"^(?P<lead>\s*(?:from|import)\s+)(?P<module>lightning\.(?:pytorch|fabric)|lightning_accel\.core\.compat)\b",
    re.MULTILINE,
)
_RENAMES = {"lightning.pytorch": "pytorch_lightning", "lightning.fabric": "lightning_fabric"}
_LIGHTNING_ROOTS = ("lightning", "lightning_accel.core.compat")


def _rename(match: re.Match[str]) -> str:
    module = match.group("module")
    if module in _RENAMES:
        return match.group("lead") + _RENAMES[module]
    # Imported lazily: the finder module imports this one.
    from lightning_accel.core.twins._finder import twin_name

    return match.group("lead") + twin_name(module)


def rewrite_imports(source: str) -> str:
    """Rewrite the Lightning imports of a module's source for the ``pytorch_lightning`` tree.

    Lines are neither added nor removed, so line numbers stay valid.

    Example:
        >>> rewrite_imports("from lightning.pytorch.strategies import DDPStrategy")
        'from pytorch_lightning.strategies import DDPStrategy'
    """
    return _IMPORT.sub(_rename, source)


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    # Imports under `if TYPE_CHECKING:` never run, so they make no runtime dependency (lazy package __init__ files
    # import their public classes there for type checkers only).
    nodes: list[ast.AST] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        nodes.append(node)
        children = node.orelse if _is_type_checking_block(node) else list(ast.iter_child_nodes(node))  # type: ignore[attr-defined]
        pending.extend(children)
    return nodes


def _imported_modules(tree: ast.Module, module_name: str, is_package: bool) -> list[str]:
    package = module_name if is_package else module_name.rpartition(".")[0]
    found: list[str] = []
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.append(target)
            # `from . import sibling` names modules, not attributes.
            found.extend(f"{target}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def _is_lightning(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in _LIGHTNING_ROOTS)


@lru_cache(maxsize=None)
def depends_on_lightning(module_name: str) -> bool:
    """Whether ``module_name`` imports Lightning, directly or through modules of its own distribution.

    Only modules of the same distribution are followed; the check reads source files and imports nothing but the
    parent packages that :func:`importlib.util.find_spec` needs.
    """
    return _depends(module_name, frozenset())


def _depends(module_name: str, visiting: frozenset[str]) -> bool:
    if module_name in visiting:
        return False
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return False
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), filename=spec.origin)
    is_package = spec.submodule_search_locations is not None
    visiting = visiting | {module_name}
    for imported in _imported_modules(tree, module_name, is_package):
        if _is_lightning(imported):
            return True
        if _same_distribution(imported, module_name) and _depends(imported, visiting):
            return True
    return False


def _root(module_name: str) -> str:
    parts = module_name.split(".")
    # `lightning_accel` is a namespace shared by several distributions: the distribution is the second level.
    return ".".join(parts[:2]) if parts[0] == "lightning_accel" else parts[0]


def _same_distribution(imported: str, module_name: str) -> bool:
    return _root(imported) == _root(module_name) and _root(imported) != "lightning_accel.core"
