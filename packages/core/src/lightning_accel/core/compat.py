"""The one module that knows Lightning's two trees and the private names lightning-accel touches.

Lightning 2.6 installs its code twice: ``lightning.pytorch`` / ``lightning.fabric`` and the twins ``pytorch_lightning``
/ ``lightning_fabric``, each with its own registries and classes. Every other module of lightning-accel imports
Lightning's public API as ``lightning.pytorch`` / ``lightning.fabric`` (the core builds twins of vendor classes for
the other tree, see :mod:`lightning_accel.core.twins`) and any private name from here, so that an upgrade of
Lightning breaks in exactly one place.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any, Literal

from packaging.version import Version

from lightning_accel.core.errors import UnsupportedLightningError

__all__ = [
    "TESTED_LIGHTNING",
    "TRIGGERS",
    "Tree",
    "check_lightning_version",
    "connector_class",
    "lightning_version",
    "registries",
]

# The range whose connector code the selection wraps were written against and tested with.
TESTED_LIGHTNING = (Version("2.6.0"), Version("2.7.0"))

Flavour = Literal["lightning", "pytorch_lightning"]
Kind = Literal["pytorch", "fabric"]


@dataclass(frozen=True)
class Tree:
    """One of Lightning's four importable roots.

    Attributes:
        module: The root module name, e.g. ``"lightning.pytorch"`` or ``"lightning_fabric"``.
        kind: ``"pytorch"`` (Trainer) or ``"fabric"``.
        flavour: ``"lightning"`` (the unified package) or ``"pytorch_lightning"`` (the standalone twins).
        distribution: The distribution whose version guards this tree.
    """

    module: str
    kind: Kind
    flavour: Flavour
    distribution: str


TRIGGERS: dict[str, Tree] = {
    "lightning.pytorch": Tree("lightning.pytorch", "pytorch", "lightning", "lightning"),
    "lightning.fabric": Tree("lightning.fabric", "fabric", "lightning", "lightning"),
    "pytorch_lightning": Tree("pytorch_lightning", "pytorch", "pytorch_lightning", "pytorch-lightning"),
    "lightning_fabric": Tree("lightning_fabric", "fabric", "pytorch_lightning", "lightning-fabric"),
}


def lightning_version(tree: Tree) -> Version | None:
    """The installed version of the distribution behind ``tree``, or ``None`` when it is not installed."""
    module = sys.modules.get(tree.module)
    declared = getattr(module, "__version__", None) if module is not None else None
    if isinstance(declared, str):
        return Version(declared)
    names = (tree.distribution, "lightning") if tree.distribution == "lightning-fabric" else (tree.distribution,)
    for name in names:
        try:
            return Version(version(name))
        except PackageNotFoundError:
            continue
    return None


def check_lightning_version(tree: Tree) -> None:
    """Refuse a Lightning outside the tested range instead of guessing at its internals.

    Raises:
        UnsupportedLightningError: When the installed version is outside :data:`TESTED_LIGHTNING`.
    """
    found = lightning_version(tree)
    low, high = TESTED_LIGHTNING
    if found is None or not low <= Version(found.base_version) < high:
        raise UnsupportedLightningError(
            f"lightning-accel supports {tree.distribution} >={low},<{high}, but {found or 'an unknown version'} is "
            f"installed (tree {tree.module!r}). Install a supported version, e.g. `pip install "
            f"'{tree.distribution}>={low},<{high}'`, or upgrade lightning-accel-core."
        )


def registries(tree: Tree) -> tuple[dict[str, Any], dict[str, Any]]:
    """The accelerator and strategy registries of an imported tree."""
    if tree.kind == "pytorch":
        accelerators = sys.modules[f"{tree.module}.accelerators"]
        strategies = sys.modules[f"{tree.module}.strategies"]
        return accelerators.AcceleratorRegistry, strategies.StrategyRegistry
    accelerators = sys.modules[f"{tree.module}.accelerators"]
    strategies = sys.modules[f"{tree.module}.strategies"]
    return accelerators.ACCELERATOR_REGISTRY, strategies.STRATEGY_REGISTRY


def connector_class(tree: Tree) -> type:
    """The private connector class that resolves ``accelerator=`` / ``strategy=`` for the tree."""
    if tree.kind == "pytorch":
        module: ModuleType = __import__(
            f"{tree.module}.trainer.connectors.accelerator_connector", fromlist=["_AcceleratorConnector"]
        )
        connector: type = module._AcceleratorConnector
        return connector
    module = __import__(f"{tree.module}.connector", fromlist=["_Connector"])
    fabric_connector: type = module._Connector
    return fabric_connector


# --- names requested by vendor packages ---
