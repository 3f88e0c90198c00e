"""Keep a package's class where the SDK's package has it, over its submodule of the same name.

The SDK's ``hpex.optimizers``, ``hpex.normalization`` and ``hpex.kernels`` import ``FusedAdamW`` (the class) from
their submodule ``FusedAdamW``, so the package attribute is the class. On the SDK a later
``import habana_frameworks.torch.hpex.optimizers.FusedAdamW`` finds the submodule loaded and leaves the attribute
alone. Under emulation that SDK name is new to the import system (an alias of the emulator's module), and importing it
sets the package attribute to the submodule, which would turn ``optimizers.FusedAdamW(...)`` into calling a module.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

__all__ = ["keep_classes"]


def keep_classes(package_name: str) -> None:
    """Make ``package_name`` ignore a submodule assigned over an attribute it already has as a class."""
    package = sys.modules[package_name]

    class _Package(ModuleType):
        def __setattr__(self, name: str, value: Any) -> None:
            if isinstance(value, ModuleType) and isinstance(self.__dict__.get(name), type):
                return  # the import system naming the submodule: the class stays, as on the SDK
            super().__setattr__(name, value)

    _Package.__name__ = f"{type(package).__name__}WithClasses"
    package.__class__ = _Package
