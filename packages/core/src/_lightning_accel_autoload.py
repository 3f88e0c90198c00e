"""Post-import hook that registers lightning-accel plugins into Lightning, installed at interpreter start.

``lightning_accel_autoload.pth`` (and its PEP 829 twin ``lightning_accel_autoload.start``) call :func:`install`,
which puts one finder on ``sys.meta_path`` and imports nothing else. When ``lightning.pytorch``,
``lightning.fabric``, ``pytorch_lightning`` or ``lightning_fabric`` has finished importing, the finder hands the
tree to ``lightning_accel.core.registration``. Set ``LIGHTNING_ACCEL_AUTOLOAD=0`` to turn it off. When
``LIGHTNING_ACCEL_EMULATE`` is set, it also installs ``_lightning_accel_sdk_aliases`` (the real SDK module names
resolve to the emulators).
Kept to the standard library and tiny on purpose: it runs in every interpreter of the environment.
"""

import os
import sys

# Runs in every interpreter: importing `typing` here would cost milliseconds, so types are for mypy only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["environment_at_start", "install", "loading_sdk", "sdk_load"]

# The rendezvous variables as the user's environment gave them, before any vendor SDK could load: the Gaudi SDK fills
# in MASTER_ADDR=localhost and MASTER_PORT=12345 when it loads (at `import torch` in eager mode), and the HPU strategies
# must not take those for the user's settings.
_AT_START = {name: os.environ.get(name) for name in ("MASTER_ADDR", "MASTER_PORT")}


def environment_at_start() -> "dict[str, str | None]":
    """``MASTER_ADDR`` and ``MASTER_PORT`` as they were when the interpreter started (``None``: unset)."""
    return dict(_AT_START)


_TRIGGERS = frozenset(("lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric"))
_fired: "set[tuple[str, int]]" = set()


def _fire(name: str, module: object) -> None:
    key = (name, id(module))
    if key in _fired:
        return
    _fired.add(key)
    try:
        from lightning_accel.core.registration import register_tree

        register_tree(name)
    except Exception as exc:  # never break the user's `import lightning`
        import warnings

        warnings.warn(
            f"lightning-accel-core could not register plugins into {name}: {type(exc).__name__}: {exc}",
            RuntimeWarning,
            stacklevel=2,
        )


class _ChainedLoader:
    """Runs the real loader, then fires; everything else is delegated to the real loader."""

    def __init__(self, loader: "Any", name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: "Any") -> "Any":
        return self._loader.create_module(spec)

    def exec_module(self, module: "Any") -> None:
        # Introspection (inspect, importlib.resources, reload) must see the real loader.
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _fire(self._name, module)

    def __getattr__(self, name: str) -> "Any":
        return getattr(self._loader, name)


class _Finder:
    def __init__(self) -> None:
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: "Any" = None, target: "Any" = None) -> "Any":
        if fullname not in _TRIGGERS or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.discard(fullname)
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ChainedLoader(spec.loader, fullname)  # type: ignore[assignment]
        return spec


_sdk_loads = 0


def _autoload_on() -> bool:
    return os.environ.get("LIGHTNING_ACCEL_AUTOLOAD", "1").strip().lower() not in ("0", "false", "no", "off")


def loading_sdk() -> bool:
    """Whether an emulated SDK is being loaded (see :class:`sdk_load`)."""
    return _sdk_loads > 0


def _is_emulator(package: str) -> bool:
    """Whether ``package`` is an emulator distribution's package (an emulated SDK's target), not a vendor package."""
    import _lightning_accel_sdk_aliases

    return package in _lightning_accel_sdk_aliases.aliases().values()


class sdk_load:
    """Context of loading an emulated SDK as a side effect (torch's backend autoload, an import of the SDK's name).

    ``emulator`` is the emulator's module (or one of its submodules). The load may import vendor packages: the one
    an emulator lives in (``lightning_accel.<vendor>._emulator``), and the ones whose plugin specs the emulation
    settings read. Those imports are not the user's request to register plugins, so ``LIGHTNING_ACCEL_AUTOLOAD=0``
    still holds, for a vendor package that declares ``_REGISTERS_ON_IMPORT = True``: imported first by the load, it
    is forgotten afterwards (its modules stay), so that the user's own ``import lightning_accel.<vendor>`` runs its
    ``__init__`` again, which registers. For the emulator's own vendor package without that flag, importing it
    registers, as always. An emulator that is a distribution of its own (``lightning_accel.habana_emulator``, the
    target of an emulated SDK's prefix) is no vendor package: its load registers nothing.
    """

    def __init__(self, emulator: str) -> None:
        self._vendor = ".".join(emulator.split(".")[:2])

    def __enter__(self) -> None:
        global _sdk_loads
        _sdk_loads += 1
        self._before = set(_vendor_packages())

    def __exit__(self, *exc: object) -> None:
        global _sdk_loads
        _sdk_loads -= 1
        if _sdk_loads:
            return
        imported = {name: module for name, module in _vendor_packages().items() if name not in self._before}
        for name, module in imported.items():
            if getattr(module, "_REGISTERS_ON_IMPORT", False) and not _autoload_on():
                del sys.modules[name]
        vendor = imported.get(self._vendor)
        if vendor is None or getattr(vendor, "_REGISTERS_ON_IMPORT", False) or _is_emulator(self._vendor):
            return
        install(explicit=True)


def _vendor_packages() -> "dict[str, Any]":
    return {
        name: module
        for name, module in list(sys.modules.items())
        if name.count(".") == 1 and name.startswith("lightning_accel.")
    }


def install(explicit: bool = False) -> None:
    """Install the hook; fire at once for trees already imported.

    ``explicit=True`` (used by ``import lightning_accel.core``) ignores ``LIGHTNING_ACCEL_AUTOLOAD``: importing
    lightning-accel is itself the request to register.
    """
    if os.environ.get("LIGHTNING_ACCEL_EMULATE", "").strip().lower() not in ("", "0", "none", "false", "off"):
        # Emulation asked for: the real SDK module names must resolve to the emulators from the first import on.
        import _lightning_accel_sdk_aliases

        _lightning_accel_sdk_aliases.install()
    if not explicit and not _autoload_on():
        return
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    for name in _TRIGGERS:
        module = sys.modules.get(name)
        spec = getattr(module, "__spec__", None)
        if module is not None and not getattr(spec, "_initializing", False):
            _fire(name, module)
