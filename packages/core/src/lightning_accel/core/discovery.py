"""Finding the installed plugins through the ``lightning_accel.plugins`` entry-point group.

A plugin that fails to load, or that resolves to something other than a :class:`PluginSpec`, produces a warning
naming its distribution and is skipped: a broken vendor install must never break ``import lightning``.
``LIGHTNING_ACCEL_DISABLE=habana,graphcore`` skips plugins by name; a name there that no installed plugin has is a
warning (a typo would otherwise leave the plugin enabled without a word).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import Distribution, EntryPoint

from lightning_accel.core.plugin import ENTRY_POINT_GROUP, PluginSpec
from lightning_accel.core.pycompat import entry_points_of

__all__ = [
    "DISABLE_VAR",
    "PluginLoadWarning",
    "UnknownPluginNameWarning",
    "DiscoveredPlugin",
    "disabled_names",
    "discovered_plugins",
    "reset_discovery",
]

DISABLE_VAR = "LIGHTNING_ACCEL_DISABLE"


class PluginLoadWarning(UserWarning):
    """A plugin entry point could not be loaded and was skipped."""


class UnknownPluginNameWarning(UserWarning):
    """``LIGHTNING_ACCEL_DISABLE`` names a plugin that is not installed."""


@dataclass(frozen=True)
class DiscoveredPlugin:
    """A plugin spec together with where it came from.

    Attributes:
        spec: The loaded spec.
        distribution: The distribution that declares the entry point.
        version: That distribution's version.
    """

    spec: PluginSpec
    distribution: str
    version: str

    @property
    def name(self) -> str:
        """The plugin's short name."""
        return self.spec.name

    @property
    def emulates(self) -> tuple[str, ...]:
        """Device types whose emulator the plugin provides."""
        return self.spec.emulates


def disabled_names() -> frozenset[str]:
    """The plugin names listed in ``LIGHTNING_ACCEL_DISABLE``."""
    raw = os.environ.get(DISABLE_VAR, "")
    return frozenset(part.strip().lower() for part in raw.split(",") if part.strip())


def _load(entry_point: EntryPoint, dist: Distribution | None) -> DiscoveredPlugin | None:
    dist_name = dist.metadata["Name"] if dist is not None else f"<unknown distribution of {entry_point.value}>"
    version = dist.version if dist is not None else "?"
    try:
        spec = entry_point.load()
    except Exception as exc:  # a broken vendor install must only warn, whatever it raises
        warnings.warn(
            f"lightning-accel: skipping plugin {entry_point.name!r} of distribution {dist_name!r} {version}: loading "
            f"{entry_point.value!r} failed with {type(exc).__name__}: {exc}. Reinstall or upgrade that distribution, "
            f"or set {DISABLE_VAR}={entry_point.name} to silence this.",
            PluginLoadWarning,
            stacklevel=2,
        )
        return None
    if not isinstance(spec, PluginSpec):
        warnings.warn(
            f"lightning-accel: skipping plugin {entry_point.name!r} of distribution {dist_name!r} {version}: "
            f"{entry_point.value!r} is a {type(spec).__name__}, not a lightning_accel.core.PluginSpec. The "
            "distribution was probably built for another version of lightning-accel-core; upgrade it.",
            PluginLoadWarning,
            stacklevel=2,
        )
        return None
    return DiscoveredPlugin(spec=spec, distribution=dist_name, version=version)


@lru_cache(maxsize=1)
def discovered_plugins() -> tuple[DiscoveredPlugin, ...]:
    """Load every enabled plugin once, sorted by name.

    Duplicate entry points (a stale install next to a fresh one) are loaded once.
    """
    disabled = disabled_names()
    seen: dict[str, DiscoveredPlugin] = {}
    known: set[str] = set()
    for entry_point, dist in entry_points_of(ENTRY_POINT_GROUP):
        known.add(entry_point.name.lower())
        if entry_point.name.lower() in disabled or entry_point.name in seen:
            continue
        plugin = _load(entry_point, dist)
        if plugin is not None:
            known.add(plugin.name.lower())
            if plugin.name.lower() not in disabled:
                seen[plugin.name] = plugin
    unknown = sorted(disabled - known)
    if unknown:
        warnings.warn(
            f"lightning-accel: {DISABLE_VAR}={os.environ.get(DISABLE_VAR)!r} names {', '.join(map(repr, unknown))}, "
            f"which no installed plugin is called. Installed plugins: {', '.join(sorted(known)) or 'none'}. Fix the "
            f"name (`lightning-accel list` shows them), or remove it from {DISABLE_VAR}.",
            UnknownPluginNameWarning,
            stacklevel=2,
        )
    return tuple(sorted(seen.values(), key=lambda plugin: plugin.name))


def reset_discovery() -> None:
    """Forget the loaded plugins so that the next call scans the entry points again."""
    discovered_plugins.cache_clear()
