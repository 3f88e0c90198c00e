"""The emulated vendor SDKs answer to the real SDKs' module names.

With ``LIGHTNING_ACCEL_EMULATE=hpu`` a user script's ``import habana_frameworks.torch.core as htcore`` must get the
emulator, exactly as it gets the SDK on a Gaudi machine. A vendor distribution declares which real module prefix its
emulator stands in for, in the entry-point group ``lightning_accel.emulated_sdks.<device type>``::

    [project.entry-points."lightning_accel.emulated_sdks.hpu"]
    "habana_frameworks.torch" = "lightning_accel.habana_emulator"

:func:`install` puts one finder at the front of ``sys.meta_path``. For a device type named in
``LIGHTNING_ACCEL_EMULATE`` (or ``all``) the finder answers imports of the declared prefix and its submodules with
the emulator's modules (the same module objects, under both names), and synthesises the prefix's parent packages
(``habana_frameworks``). Being first, it wins over an installed SDK: an explicit request to emulate wins. Nothing
is aliased for a device type that is not emulated, so libraries that probe for an SDK see it only when asked for.

Kept to the standard library: it is installed at interpreter start (from ``lightning_accel_autoload.pth``) when
``LIGHTNING_ACCEL_EMULATE`` is set. The entry points are read at the first import of a module outside the standard
library, once per value of the variable.
"""

import importlib
import importlib.util
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

__all__ = ["GROUP_PREFIX", "aliases", "forget", "install"]

GROUP_PREFIX = "lightning_accel.emulated_sdks."
_EMULATE_VAR = "LIGHTNING_ACCEL_EMULATE"
_OFF_VALUES = ("", "0", "none", "false", "off")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


def _requested() -> "tuple[str, ...]":
    value = os.environ.get(_EMULATE_VAR, "").strip().lower()
    if value in _OFF_VALUES:
        return ()
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _read_entry_points(tokens: "tuple[str, ...]") -> "dict[str, str]":
    from importlib.metadata import entry_points

    everything = entry_points()
    # Python 3.8 and 3.9 return a dict of group -> entry points; 3.10 and later an EntryPoints object.
    selectable = hasattr(everything, "select")
    names = everything.groups if selectable else everything.keys()
    if "all" in tokens:
        groups = [group for group in names if group.startswith(GROUP_PREFIX)]
    else:
        groups = [GROUP_PREFIX + token for token in tokens]
    table: dict[str, str] = {}
    for group in sorted(groups):
        for entry in everything.select(group=group) if selectable else everything.get(group, ()):
            table.setdefault(entry.name, entry.value.partition(":")[0].strip())
    return table


_cache: "tuple[tuple[str, ...], dict[str, str]] | None" = None


def aliases() -> "dict[str, str]":
    """Real module prefix -> emulator module, for the device types emulated now (empty when none are)."""
    global _cache
    tokens = _requested()
    if not tokens:
        return {}
    if _cache is None or _cache[0] != tokens:
        _cache = (tokens, _read_entry_points(tokens))
    return _cache[1]


# Names this finder has answered, so that they can be taken back when emulation is switched off in-process.
_served: "set[str]" = set()


class _AliasLoader:
    """Hands out an already importable module under another name (the same object, not a copy)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: "ModuleSpec") -> "ModuleType":
        import _lightning_accel_autoload

        # Importing the SDK's name is no request to register lightning-accel's plugins (LIGHTNING_ACCEL_AUTOLOAD=0).
        with _lightning_accel_autoload.sdk_load(self.target):
            module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: "ModuleType") -> None:
        # The target module has run already (running it again would reset its state). The import system has just
        # set its __spec__ to the alias's; give it back its own, or relative imports inside it would disagree with
        # its __package__. Set past the module's own __setattr__: torch's config modules (the SDK's compile backend
        # config is one) refuse any attribute that is not one of their settings.
        from types import ModuleType

        ModuleType.__setattr__(module, "__spec__", self._own_spec)


class _ParentLoader:
    """A parent package of an aliased prefix (``habana_frameworks`` for ``habana_frameworks.torch``)."""

    def create_module(self, spec: "ModuleSpec") -> "ModuleType":
        from types import ModuleType

        module = ModuleType(spec.name, "Stand-in parent package of an emulated SDK (LIGHTNING_ACCEL_EMULATE).")
        module.__path__ = []
        return module

    def exec_module(self, module: "ModuleType") -> None:
        pass


class AliasFinder:
    """``sys.meta_path`` finder for the real SDK module names of the emulated device types."""

    def __init__(self) -> None:
        self._busy = False

    def find_spec(self, fullname: str, path: "Any" = None, target: "Any" = None) -> "ModuleSpec | None":
        root = fullname.partition(".")[0]
        if self._busy or root in _STDLIB or root.startswith("_"):
            return None
        self._busy = True  # reading entry points imports modules, which come back here
        try:
            table = aliases()
        finally:
            self._busy = False
        if not table:
            return None
        from importlib.machinery import ModuleSpec

        for prefix, emulator in table.items():
            if fullname == prefix or fullname.startswith(prefix + "."):
                name = emulator + fullname[len(prefix) :]
                found = importlib.util.find_spec(name)
                if found is None:
                    return None  # ModuleNotFoundError under the real name, as the SDK would give
                is_package = found.submodule_search_locations is not None
                _served.add(fullname)
                return ModuleSpec(fullname, _AliasLoader(name), is_package=is_package)  # type: ignore[arg-type]
            if prefix.startswith(fullname + "."):
                _served.add(fullname)
                return ModuleSpec(fullname, _ParentLoader(), is_package=True)  # type: ignore[arg-type]
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())


def forget() -> None:
    """Take the aliased names out of ``sys.modules`` (emulation was switched off in this process).

    The next ``import habana_frameworks`` then finds the real SDK, or fails as it would without the emulator.
    """
    for name in sorted(_served, reverse=True):
        sys.modules.pop(name, None)
    _served.clear()
