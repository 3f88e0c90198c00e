"""Registering discovered plugins into the registries of an imported Lightning tree.

Registration is cheap: each registry entry is a :class:`LazyClass` that imports the vendor class on first use
(when a Trainer or Fabric is built), so ``import lightning`` never imports vendor code and a vendor module may
import any part of Lightning without import cycles.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from lightning_accel.core.compat import TRIGGERS, Tree, lightning_version, misconfiguration_exception, registries
from lightning_accel.core.discovery import DiscoveredPlugin, PluginLoadWarning, discovered_plugins
from lightning_accel.core.errors import adopt_lightning_base
from lightning_accel.core.plugin import AcceleratorSpec, import_target
from lightning_accel.core.twins import twin_name

__all__ = [
    "LazyClass",
    "supports_installed_lightning",
    "VendorAccelerator",
    "lightning_equivalents",
    "register_tree",
    "registered_trees",
    "strategy_accelerators",
    "vendor_accelerators",
]


class LazyClass:
    """A registry entry that stands for a vendor class until it is first used.

    Lightning's registries call the entry to build an instance and read attributes such as ``is_available`` from
    it; both are forwarded to the class, which is imported then.

    Example:
        >>> entry = LazyClass("collections:OrderedDict", "lightning", "demo")
        >>> entry(a=1)
        OrderedDict({'a': 1})
    """

    def __init__(self, target: str, flavour: str, distribution: str) -> None:
        module, _, attribute = target.partition(":")
        if flavour == "pytorch_lightning":
            module = twin_name(module)
        self.target = f"{module}:{attribute}"
        self.distribution = distribution
        self._cls: type | None = None

    def load(self) -> type:
        """Import and return the class.

        Raises:
            ImportError: Naming the distribution when the class cannot be imported.
        """
        if self._cls is None:
            try:
                self._cls = import_target(self.target)
            except Exception as exc:
                raise ImportError(
                    f"lightning-accel could not import {self.target!r} from distribution {self.distribution!r}: "
                    f"{type(exc).__name__}: {exc}. Reinstall or upgrade {self.distribution}."
                ) from exc
        return self._cls

    def loaded_class(self) -> type | None:
        """The class if its module is already imported (so the check imports nothing), else ``None``."""
        if self._cls is None:
            module, _, attribute = self.target.partition(":")
            if module in sys.modules:
                self._cls = getattr(sys.modules[module], attribute, None)
        return self._cls

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.load()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.load(), name)

    def __repr__(self) -> str:
        return f"LazyClass({self.target!r})"


@dataclass(frozen=True)
class VendorAccelerator:
    """A vendor accelerator as registered into one tree.

    Attributes:
        plugin: The plugin that declares it.
        spec: Its declaration.
        cls: The lazily imported accelerator class for this tree.
        strategies: The tree's lazily imported strategy classes, by registered name.
    """

    plugin: DiscoveredPlugin
    spec: AcceleratorSpec
    cls: LazyClass
    strategies: dict[str, LazyClass]

    def owns(self, accelerator: object) -> bool:
        """Whether ``accelerator`` (a name or an instance) is this vendor accelerator."""
        if isinstance(accelerator, str):
            return accelerator == self.spec.name
        cls = self.cls.loaded_class()
        return cls is not None and isinstance(accelerator, cls)


_registered: dict[str, list[VendorAccelerator]] = {}
# Per tree: registered strategy name -> (the accelerator it runs on, the lazily imported strategy class).
_strategy_accelerators: dict[str, dict[str, tuple[str, LazyClass]]] = {}
# Per tree: (accelerator, Lightning strategy class name) -> (the vendor strategy standing for it, its class).
_lightning_equivalents: dict[str, dict[tuple[str, str], tuple[str, LazyClass]]] = {}


def registered_trees() -> tuple[str, ...]:
    """The root modules of the trees plugins were registered into."""
    return tuple(_registered)


def vendor_accelerators(tree: Tree) -> list[VendorAccelerator]:
    """The vendor accelerators registered into ``tree`` (empty before registration)."""
    return _registered.get(tree.module, [])


def strategy_accelerators(tree: Tree) -> dict[str, tuple[str, LazyClass]]:
    """Registered vendor strategy names of ``tree`` mapped to the accelerator they run on and their class."""
    return _strategy_accelerators.get(tree.module, {})


def lightning_equivalents(tree: Tree) -> dict[tuple[str, str], tuple[str, LazyClass]]:
    """``(accelerator, Lightning strategy class name)`` mapped to the registered vendor strategy that replaces it."""
    return _lightning_equivalents.get(tree.module, {})


def _register_plugin(plugin: DiscoveredPlugin, tree: Tree, accel_registry: Any, strategy_registry: Any) -> None:
    spec = plugin.spec
    strategies: dict[str, LazyClass] = {}
    for strategy in spec.strategies:
        target = strategy.trainer if tree.kind == "pytorch" else strategy.fabric
        if target is None:
            continue
        entry = LazyClass(target, tree.flavour, plugin.distribution)
        strategies[strategy.name] = entry
        runs_on = strategy.accelerator or (spec.accelerators[0].name if spec.accelerators else None)
        if runs_on is not None:
            _strategy_accelerators[tree.module][strategy.name] = (runs_on, entry)
            if strategy.replaces:
                _lightning_equivalents[tree.module].setdefault((runs_on, strategy.replaces), (strategy.name, entry))
        strategy_registry.register(
            strategy.name, entry, description=strategy.description, override=True, **dict(strategy.init_params)
        )
    for accelerator in spec.accelerators:
        target = accelerator.trainer if tree.kind == "pytorch" else accelerator.fabric
        if target is None:
            continue
        entry = LazyClass(target, tree.flavour, plugin.distribution)
        accel_registry.register(accelerator.name, entry, description=accelerator.description, override=True)
        _registered[tree.module].append(VendorAccelerator(plugin, accelerator, entry, strategies))


def supports_installed_lightning(plugin: DiscoveredPlugin, tree: Tree, installed: Version | None) -> bool:
    """Whether ``plugin`` declares support for the installed Lightning; warns naming both when it does not."""
    if installed is None or plugin.spec.supports_lightning(str(installed)):
        return True
    warnings.warn(
        f"lightning-accel: plugin {plugin.name!r} ({plugin.distribution} {plugin.version}) supports Lightning "
        f"{plugin.spec.lightning}, but {tree.distribution} {installed} is installed; its accelerators and strategies "
        f"are not registered into {tree.module}. Install a Lightning in that range (`pip install "
        f"'{tree.distribution}{plugin.spec.lightning}'`) or a release of {plugin.distribution} that supports yours.",
        PluginLoadWarning,
        stacklevel=3,
    )
    return False


def register_tree(module_name: str) -> None:
    """Register every enabled plugin into the tree rooted at ``module_name``; wrap its connector and throughput tools.

    Called by the post-import hook when ``lightning.pytorch``, ``lightning.fabric``, ``pytorch_lightning`` or
    ``lightning_fabric`` has been imported, and by ``import lightning_accel.core`` for trees already imported.
    Idempotent. A plugin whose registration fails is skipped with a :class:`PluginLoadWarning`.
    """
    tree = TRIGGERS[module_name]
    if tree.module in _registered:
        return
    # Our configuration errors become this tree's MisconfigurationException as soon as the tree exists.
    adopt_lightning_base(misconfiguration_exception(tree))
    # Imported here: selection imports the connector modules, which exist only once the tree is imported.
    from lightning_accel.core.selection import install_selection
    from lightning_accel.core.throughput import install_throughput

    _registered[tree.module] = []
    _strategy_accelerators[tree.module] = {}
    _lightning_equivalents[tree.module] = {}
    accel_registry, strategy_registry = registries(tree)
    installed = lightning_version(tree)
    for plugin in discovered_plugins():
        if tree.flavour == "pytorch_lightning" and not plugin.spec.supports_pytorch_lightning:
            continue
        if not supports_installed_lightning(plugin, tree, installed):
            continue
        try:
            _register_plugin(plugin, tree, accel_registry, strategy_registry)
        except Exception as exc:  # one broken plugin must not break `import lightning`
            warnings.warn(
                f"lightning-accel: could not register plugin {plugin.name!r} of {plugin.distribution!r} "
                f"{plugin.version} into {tree.module}: {type(exc).__name__}: {exc}",
                PluginLoadWarning,
                stacklevel=2,
            )
    install_selection(tree)
    install_throughput(tree)
