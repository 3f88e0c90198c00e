"""Moving instances of vendor classes between Lightning's two trees.

Lightning 2.6 installs its code twice, ``lightning.pytorch`` / ``lightning.fabric`` and ``pytorch_lightning`` /
``lightning_fabric``, and each tree checks ``isinstance`` against its own base classes. Vendor classes are written
against ``lightning.pytorch`` and the core builds their twins for the other tree (:mod:`lightning_accel.core.twins`),
so ``pytorch_lightning.Trainer(accelerator="hpu")`` works; but an *instance* built from the public import
(``pl.Trainer(accelerator=HPUAccelerator())``) belongs to the ``lightning`` tree and the other tree refuses it.

Alternatives considered: virtual subclasses are impossible (Lightning's bases are concrete classes, and ``isinstance``
on them ignores ``__subclasshook__``); classes inheriting from both trees' bases would mix both trees' internals in one
object (each tree's methods check its own types on the attributes they set); re-running ``__init__`` needs the
arguments, which no Lightning class records. What works for every class without vendor code: a twin class is the
same source as its original, so the original's state is a valid state for the twin. The connector wrap therefore
*transplants* a vendor object of the other tree before Lightning sees it: a new object of the twin class with the
same attribute values, where every value that is itself an object of the other tree (a vendor object, or one of
Lightning's own such as a cluster environment or checkpoint IO) is transplanted too, and everything else (tensors,
options, emulator state, plain data) is shared. Shared references stay shared (one memo per Trainer or Fabric), so a
precision plugin given both as ``plugins=[p]`` and inside a strategy stays one object.

The Trainer then holds the transplanted copy, not the user's object: read ``trainer.strategy`` /
``trainer.accelerator`` rather than the object passed in. A class defined outside a plugin's distribution (a user's
subclass of a vendor class) has no twin; it is refused with an error saying what to do.

Example:
    >>> import pytorch_lightning as pl  # doctest: +SKIP
    >>> from lightning_accel.habana import HPUAccelerator  # doctest: +SKIP
    >>> pl.Trainer(accelerator=HPUAccelerator(), devices=1).accelerator  # doctest: +SKIP
    <lightning_accel.core.twins.pytorch_lightning.lightning_accel.habana.accelerator.HPUAccelerator object at ...>
"""

from __future__ import annotations

import enum
import importlib
from typing import Any

from lightning_accel.core.compat import Flavour
from lightning_accel.core.discovery import discovered_plugins
from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.pycompat import strict_zip
from lightning_accel.core.twins import TWIN_ROOT, twin_name

__all__ = ["counterpart_class", "flavour_of", "to_tree"]

# Lightning's own roots, per flavour, in matching order.
_LIGHTNING_ROOTS: dict[Flavour, tuple[str, ...]] = {
    "lightning": ("lightning.pytorch", "lightning.fabric"),
    "pytorch_lightning": ("pytorch_lightning", "lightning_fabric"),
}


def _under(module: str, root: str) -> bool:
    return module == root or module.startswith(root + ".")


def _plugin_roots() -> frozenset[str]:
    """The top-level packages of every discovered plugin (``lightning_accel.habana``, ``my_vendor``)."""
    roots: set[str] = set()
    for plugin in discovered_plugins():
        targets = [t for a in plugin.spec.accelerators for t in (a.trainer, a.fabric)]
        targets += [t for s in plugin.spec.strategies for t in (s.trainer, s.fabric)]
        for target in targets:
            if target is None:
                continue
            parts = target.partition(":")[0].split(".")
            roots.add(".".join(parts[:2]) if parts[0] == "lightning_accel" else parts[0])
    return frozenset(roots)


def _lightning_own(module: str) -> bool:
    return any(_under(module, root) for roots in _LIGHTNING_ROOTS.values() for root in roots)


def _is_vendor(module: str) -> bool:
    return any(_under(module, root) for root in _plugin_roots())


def flavour_of(module: str) -> Flavour | None:
    """The tree whose classes ``module`` defines, or ``None`` for modules of neither (torch, the core).

    Lightning's own modules belong to their tree; vendor modules to ``"lightning"`` and their twins to
    ``"pytorch_lightning"``.
    """
    for flavour, roots in _LIGHTNING_ROOTS.items():
        if any(_under(module, root) for root in roots):
            return flavour
    if _under(module, TWIN_ROOT):
        return "pytorch_lightning"
    return "lightning" if _is_vendor(module) else None


def _counterpart_module(module: str, flavour: Flavour) -> str:
    source: Flavour = "pytorch_lightning" if flavour == "lightning" else "lightning"
    for old, new in strict_zip(_LIGHTNING_ROOTS[source], _LIGHTNING_ROOTS[flavour]):
        if _under(module, old):
            return new + module[len(old) :]
    if flavour == "lightning":
        return module[len(TWIN_ROOT) + 1 :]
    return twin_name(module)


def counterpart_class(cls: type, flavour: Flavour) -> type:
    """The class of the ``flavour`` tree that corresponds to ``cls`` (``cls`` itself when it is tree-neutral).

    Raises:
        ConfigurationError: When the counterpart cannot be imported (the plugin does not support that tree).
    """
    origin = flavour_of(cls.__module__)
    if origin is None or origin == flavour:
        return cls
    module_name = _counterpart_module(cls.__module__, flavour)
    try:
        found: Any = importlib.import_module(module_name)
        for part in cls.__qualname__.split("."):
            found = getattr(found, part)
    except Exception as exc:
        raise ConfigurationError(
            f"{cls.__module__}.{cls.__qualname__} cannot be used with the {flavour} tree: its counterpart "
            f"{module_name}.{cls.__qualname__} could not be loaded ({type(exc).__name__}: {exc}). Import Lightning "
            f"as the tree the class was written for, or pass the name it is registered under instead of an instance."
        ) from exc
    if not isinstance(found, type):
        raise ConfigurationError(f"{module_name}.{cls.__qualname__} is not a class; cannot move {cls!r} across trees.")
    return found


def _transplant(obj: Any, flavour: Flavour, memo: dict[int, Any]) -> Any:
    key = id(obj)
    if key in memo:
        return memo[key]
    kind = type(obj)
    if kind in (list, tuple, set, frozenset):
        items = [_transplant(item, flavour, memo) for item in obj]
        result: Any = obj if all(a is b for a, b in strict_zip(items, obj)) else kind(items)
    elif kind is dict:
        pairs = {k: _transplant(v, flavour, memo) for k, v in obj.items()}
        result = obj if all(pairs[k] is v for k, v in obj.items()) else pairs
    elif isinstance(obj, type):
        result = counterpart_class(obj, flavour)
    else:
        target = counterpart_class(kind, flavour)
        if target is kind:
            result = obj
        elif isinstance(obj, enum.Enum):
            result = target[obj.name]  # type: ignore[index]
        elif not hasattr(obj, "__dict__"):
            result = obj  # no instance state to move (slots-only objects are not in Lightning's trees)
        else:
            result = object.__new__(target)
            memo[key] = result  # before the attributes: cycles (a strategy and its launcher) resolve to the copy
            result.__dict__.update({name: _transplant(value, flavour, memo) for name, value in vars(obj).items()})
    memo[key] = result
    return result


def _foreign_vendor_base(obj: object, flavour: Flavour) -> type | None:
    """A vendor class of the other tree that ``obj``'s class derives from, when the class itself is not a vendor's."""
    for base in type(obj).__mro__[1:]:
        origin = flavour_of(base.__module__)
        if origin is not None and origin != flavour and not _lightning_own(base.__module__):
            return base
    return None


def to_tree(obj: Any, flavour: Flavour, argument: str, memo: dict[int, Any]) -> Any:
    """``obj`` as an object of the ``flavour`` tree when it is a vendor object of the other tree, else ``obj``.

    Args:
        obj: The value a user passed to the Trainer or Fabric (``accelerator=``, ``strategy=`` or one plugin).
        flavour: The tree of the Trainer or Fabric receiving it.
        argument: The argument's name, for error messages.
        memo: Shared between the arguments of one call, so shared objects stay shared.

    Raises:
        ConfigurationError: For an object of a class defined outside a plugin's distribution that derives from a
            vendor class of the other tree (it has no twin).
    """
    if isinstance(obj, (str, int, type(None))) or isinstance(obj, type):
        return obj
    origin = flavour_of(type(obj).__module__)
    if origin is None:
        base = _foreign_vendor_base(obj, flavour)
        if base is not None:
            raise ConfigurationError(
                f"{argument}={obj!r} is not accepted by the {flavour} tree: {type(obj).__qualname__} (defined in "
                f"{type(obj).__module__}) derives from {base.__module__}.{base.__qualname__} of the other Lightning "
                "tree, and lightning-accel can move only its own classes between trees. Import Lightning the way "
                f"{type(obj).__module__} does (`import lightning.pytorch` vs `import pytorch_lightning`) in your "
                "script too."
            )
        return obj
    if origin == flavour or _lightning_own(type(obj).__module__):
        # Objects of Lightning's own classes from the other tree are the user's mix-up, reported by Lightning.
        return obj
    return _transplant(obj, flavour, memo)
