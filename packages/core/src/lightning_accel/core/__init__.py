"""lightning-accel core: the neutral plugin layer between Lightning and vendor accelerators.

Vendor distributions (``lightning-accel-habana``, ``lightning-accel-graphcore``, ...) declare a
:class:`PluginSpec`; the core registers their accelerators and strategies into Lightning's registries as soon as
Lightning is imported, so ``Trainer(accelerator="hpu")`` works from a script that imports only Lightning.

Example:
    >>> from lightning_accel.core import discovered_plugins
    >>> isinstance(discovered_plugins(), tuple)
    True
"""

from lightning_accel.core.__about__ import __version__
from lightning_accel.core.discovery import (
    DISABLE_VAR,
    DiscoveredPlugin,
    PluginLoadWarning,
    UnknownPluginNameWarning,
    discovered_plugins,
)
from lightning_accel.core.emulation import EmulationSettings, announce_emulation, emulation_settings
from lightning_accel.core.errors import ConfigurationError, DeviceUnavailableError, UnsupportedLightningError
from lightning_accel.core.plugin import AcceleratorSpec, Availability, PluginSpec, StrategySpec

__all__ = [
    "DISABLE_VAR",
    "AcceleratorSpec",
    "Availability",
    "ConfigurationError",
    "DeviceUnavailableError",
    "DiscoveredPlugin",
    "EmulationSettings",
    "PluginLoadWarning",
    "PluginSpec",
    "StrategySpec",
    "UnknownPluginNameWarning",
    "UnsupportedLightningError",
    "__version__",
    "announce_emulation",
    "discovered_plugins",
    "emulation_settings",
]

# Importing lightning-accel is a request to register: this covers `python -S` and layouts without site-packages
# .pth processing, and trees imported before this package. Not when an emulated SDK's load imported it: that is no
# request of the user's, and LIGHTNING_ACCEL_AUTOLOAD=0 must hold then.
import _lightning_accel_autoload

_lightning_accel_autoload.install(explicit=not _lightning_accel_autoload.loading_sdk())
