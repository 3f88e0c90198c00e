"""The import hook that materialises twin modules on demand."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from lightning_accel.core.twins._rewrite import depends_on_lightning, rewrite_imports

__all__ = ["TWIN_ROOT", "install_finder", "twin_name"]

TWIN_ROOT = "lightning_accel.core.twins.pytorch_lightning"


def twin_name(module_name: str) -> str:
    """The name of ``module_name``'s twin in the ``pytorch_lightning`` tree."""
    return f"{TWIN_ROOT}.{module_name}"


class _TwinLoader(importlib.abc.Loader):
    def __init__(self, original: str, origin: str | None, is_package: bool) -> None:
        self._original = original
        self._origin = origin
        self._is_package = is_package

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        if self._origin is None:  # the twin root or a namespace package: nothing to run
            return
        if not self._is_package and not depends_on_lightning(self._original):
            # Nothing tree-specific inside: the twin is the original, so module state exists once. The import
            # system returns whatever sits in sys.modules after exec_module. Packages are always copied: importing
            # a twin submodule sets an attribute on its parent, which must never be the original package.
            sys.modules[module.__name__] = importlib.import_module(self._original)
            return
        module.__file__ = self._origin
        source = rewrite_imports(Path(self._origin).read_text(encoding="utf-8"))
        exec(compile(source, self._origin, "exec"), module.__dict__)


class _TwinFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == TWIN_ROOT:
            return importlib.machinery.ModuleSpec(fullname, _TwinLoader("", None, True), is_package=True)
        if not fullname.startswith(TWIN_ROOT + "."):
            return None
        original = fullname[len(TWIN_ROOT) + 1 :]
        original_spec = importlib.util.find_spec(original)
        if original_spec is None:
            return None
        is_package = original_spec.submodule_search_locations is not None
        origin = original_spec.origin if original_spec.has_location else None
        spec = importlib.machinery.ModuleSpec(
            fullname, _TwinLoader(original, origin, is_package), is_package=is_package
        )
        if is_package:
            # Children are found by this finder, never on disk under the twin name.
            spec.submodule_search_locations = []
        spec.origin = origin
        spec.has_location = origin is not None
        return spec


def install_finder() -> None:
    """Put the twin finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _TwinFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TwinFinder())
