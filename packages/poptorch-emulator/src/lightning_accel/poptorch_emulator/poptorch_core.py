"""``poptorch.poptorch_core``: poptorch's C++ binding, which the emulator does not have, as an importable module.

In poptorch 3.4 the binding is a submodule (``import poptorch.poptorch_core`` works, as poptorch's own
``tests/helpers.py`` does it) and ``python/__init__.py:41`` takes ``Error``, ``RecoverableError`` and
``UnrecoverableError`` from it. Here those three are ``poptorch``'s; calling the module or reading any other name of
it raises the ``poptorch.Error`` of :mod:`.left_out` that says it is not emulated.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from .errors import Error, RecoverableError, UnrecoverableError
from .left_out import refusal

__all__ = ["Error", "RecoverableError", "UnrecoverableError"]

_NAME = "poptorch.poptorch_core"


class _Binding(ModuleType):
    """The module's class: a name it does not define is refused (as the other left-out names are), not missing."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise refusal(_NAME)

    def __getattr__(self, attribute: str) -> Any:
        # Dunder look-ups (the import system's, pickle's, inspect's) must stay plain AttributeErrors.
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise refusal(_NAME)


sys.modules[__name__].__class__ = _Binding
