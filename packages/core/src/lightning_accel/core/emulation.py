"""The emulation switch: which vendor SDKs are replaced by their software emulators.

Three environment variables control it. They are read and validated once per process (call
:func:`reset_emulation_settings` after changing them in tests):

``LIGHTNING_ACCEL_EMULATE``
    A comma-separated list of device types whose SDK is emulated (``hpu``, ``ipu``, ...), ``all``, or empty / ``0``
    for none. The accepted device types are the ones the installed plugins declare.
``LIGHTNING_ACCEL_EMULATED_DEVICES``
    How many devices each emulator reports (default 8).
``LIGHTNING_ACCEL_EMULATE_BACKEND``
    The real device that backs the emulated one: ``cpu`` (default) or ``cuda``.

Example:
    >>> import os
    >>> os.environ["LIGHTNING_ACCEL_EMULATE"] = "all"
    >>> reset_emulation_settings()
    >>> emulation_settings().backend
    'cpu'
    >>> del os.environ["LIGHTNING_ACCEL_EMULATE"]; reset_emulation_settings()
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from lightning_accel.core.errors import ConfigurationError

__all__ = [
    "EMULATE_VAR",
    "EMULATED_DEVICES_VAR",
    "EMULATE_BACKEND_VAR",
    "EmulationSettings",
    "emulation_settings",
    "reset_emulation_settings",
    "announce_emulation",
    "follow_emulated_sdk_names",
    "emulator_installed",
]

EMULATE_VAR = "LIGHTNING_ACCEL_EMULATE"
EMULATED_DEVICES_VAR = "LIGHTNING_ACCEL_EMULATED_DEVICES"
EMULATE_BACKEND_VAR = "LIGHTNING_ACCEL_EMULATE_BACKEND"

_DEFAULT_DEVICES = 8
_MAX_DEVICES = 1024
_BACKENDS = ("cpu", "cuda")
_OFF_VALUES = ("", "0", "none", "false", "off")

log = logging.getLogger("lightning_accel")
# The same set-up as Lightning's own logger, so that the one emulation line shows next to "GPU available: ...":
# INFO level, printed by our own handler unless the application configured the root logger.
if log.level == logging.NOTSET:
    log.setLevel(logging.INFO)
if not logging.getLogger().hasHandlers() and not log.handlers:
    log.addHandler(logging.StreamHandler())
    log.propagate = False


def _global_rank() -> int:
    # Set by every launcher Lightning supports before our code runs in a worker; absent in a single process.
    for name in ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


@dataclass(frozen=True)
class EmulationSettings:
    """The parsed emulation settings of this process.

    Attributes:
        device_types: The device types whose SDK is emulated (``"all"`` is expanded lazily, see :meth:`emulates`).
        emulate_all: Whether ``LIGHTNING_ACCEL_EMULATE=all`` was given.
        devices: How many devices each emulator reports.
        backend: The real device type that backs emulated devices.
    """

    device_types: frozenset[str]
    emulate_all: bool
    devices: int
    backend: Literal["cpu", "cuda"]

    def emulates(self, device_type: str) -> bool:
        """Whether the SDK of ``device_type`` (e.g. ``"hpu"``) is emulated."""
        return self.emulate_all or device_type in self.device_types


def _parse_device_types(raw: str, known: Iterable[str]) -> tuple[frozenset[str], bool]:
    value = raw.strip().lower()
    if value in _OFF_VALUES:
        return frozenset(), False
    names = [part.strip() for part in value.split(",") if part.strip()]
    if "all" in names:
        return frozenset(), True
    accepted = sorted(set(known))
    unknown = [name for name in names if name not in accepted]
    if unknown:
        raise ConfigurationError(
            f"{EMULATE_VAR}={raw!r} names unknown device type(s) {', '.join(map(repr, unknown))}. Accepted: 'all', "
            f"a comma-separated list of {', '.join(map(repr, accepted)) or '(no plugin installed)'}, or '0' to turn "
            "emulation off. Install the vendor extra first (e.g. `pip install lightning-accel[habana]`) if the device "
            "type you want is missing."
        )
    return frozenset(names), False


def _parse_devices(raw: str | None) -> int:
    if raw is None or not raw.strip():
        return _DEFAULT_DEVICES
    try:
        count = int(raw.strip())
    except ValueError:
        count = -1
    if not 1 <= count <= _MAX_DEVICES:
        raise ConfigurationError(
            f"{EMULATED_DEVICES_VAR}={raw!r} is not a valid device count. Accepted: an integer from 1 to "
            f"{_MAX_DEVICES}; unset it for the default of {_DEFAULT_DEVICES}."
        )
    return count


def _parse_backend(raw: str | None) -> Literal["cpu", "cuda"]:
    value = (raw or "cpu").strip().lower() or "cpu"
    if value == "cpu":
        return "cpu"
    if value == "cuda":
        return "cuda"
    raise ConfigurationError(
        f"{EMULATE_BACKEND_VAR}={raw!r} is not a backing device. Accepted: {', '.join(map(repr, _BACKENDS))}; "
        "unset it for 'cpu'."
    )


def _known_device_types() -> list[str]:
    # Imported here: discovery reads entry points, which this module must not do at import time.
    from lightning_accel.core.discovery import discovered_plugins

    return [name for plugin in discovered_plugins() for name in plugin.emulates] + _emulated_sdk_device_types()


def _emulated_sdk_device_types() -> list[str]:
    """The device types an installed emulator distribution declares an SDK for (an emulator may come alone)."""
    from importlib.metadata import entry_points

    import _lightning_accel_sdk_aliases as sdk_aliases

    everything = entry_points()
    # Python 3.8 and 3.9 return a dict of group -> entry points; 3.10 and later an object with the group names.
    groups = everything.groups if hasattr(everything, "select") else everything.keys()
    return [group[len(sdk_aliases.GROUP_PREFIX) :] for group in groups if group.startswith(sdk_aliases.GROUP_PREFIX)]


@lru_cache(maxsize=1)
def emulation_settings() -> EmulationSettings:
    """Parse and validate the emulation variables once and return them.

    Raises:
        ConfigurationError: When a variable has a value that is not accepted; the message names the variable, the
            value and what is accepted.
    """
    raw = os.environ.get(EMULATE_VAR, "")
    if raw.strip().lower() in _OFF_VALUES or raw.strip().lower() == "all":
        device_types, emulate_all = _parse_device_types(raw, ())
    else:
        device_types, emulate_all = _parse_device_types(raw, _known_device_types())
    return EmulationSettings(
        device_types=device_types,
        emulate_all=emulate_all,
        devices=_parse_devices(os.environ.get(EMULATED_DEVICES_VAR)),
        backend=_parse_backend(os.environ.get(EMULATE_BACKEND_VAR)),
    )


def reset_emulation_settings() -> None:
    """Forget the parsed settings so that the next call re-reads the environment."""
    emulation_settings.cache_clear()
    _announced.clear()


_announced: set[str] = set()


def announce_emulation(device_type: str, sdk: str) -> None:
    """Log, once per process and device type and only on global rank 0, that ``sdk`` is emulated."""
    if device_type in _announced:
        return
    _announced.add(device_type)
    if _global_rank() != 0:
        return
    settings = emulation_settings()
    log.info(
        "lightning-accel: emulating %s (%s) with %d device(s) backed by %s; set %s=0 to turn emulation off.",
        device_type.upper(),
        sdk,
        settings.devices,
        settings.backend,
        EMULATE_VAR,
    )


def follow_emulated_sdk_names() -> None:
    """Make the real SDK module names follow the current settings (for a vendor's SDK seam, before it imports).

    Emulated device types: their SDK's module names resolve to the emulators (the finder installed at interpreter
    start when ``LIGHTNING_ACCEL_EMULATE`` was set then; installed here otherwise). Emulation off: names that were
    aliased earlier in this process are forgotten, so the real SDK (or its absence) shows.
    """
    import _lightning_accel_sdk_aliases as sdk_aliases

    if sdk_aliases.aliases():
        sdk_aliases.install()
    else:
        sdk_aliases.forget()


def emulator_installed(sdk_module: str) -> bool:
    """Whether an installed distribution declares an emulator for ``sdk_module`` (``"habana_frameworks.torch"``).

    Answers for the device types emulated now (``LIGHTNING_ACCEL_EMULATE``): the entry point groups
    ``lightning_accel.emulated_sdks.<device type>`` are read, nothing is imported. An emulator is a distribution of its
    own (``lightning-accel-habana[emulator]`` installs Gaudi's), so a vendor's seam checks this before it promises one.
    """
    import _lightning_accel_sdk_aliases as sdk_aliases

    return sdk_module in sdk_aliases.aliases()
