"""Lazy public attributes for package ``__init__`` modules (PEP 562).

Vendor packages keep their ``__init__`` free of heavy imports: the core loads each plugin's entry point (a module
inside the vendor package) while Lightning itself is still importing, so importing the package must not import
Lightning, torch or the vendor SDK. Public names are imported on first access instead.

Example:
    .. code-block:: python

        # lightning_accel/myvendor/__init__.py
        from typing import TYPE_CHECKING

        from lightning_accel.core.lazy import lazy_exports

        if TYPE_CHECKING:
            from .accelerator import MyAccelerator

        __all__ = ["MyAccelerator"]
        __getattr__, __dir__ = lazy_exports(__name__, {"MyAccelerator": ".accelerator"})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build a module ``__getattr__`` and ``__dir__`` that import ``name`` from ``exports[name]`` on first access.

    Args:
        package: The package's ``__name__``.
        exports: Public name to the (relative) module that defines it; ``"module:attr"`` renames.
    """

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, _, attribute = exports[name].partition(":")
        value = getattr(importlib.import_module(module_name, package), attribute or name)
        importlib.import_module(package).__dict__[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(importlib.import_module(package).__dict__))

    return __getattr__, __dir__
