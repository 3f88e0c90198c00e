"""What a vendor distribution declares for ``lightning-accel selftest``: checks, their context and their results.

A check is a plain function named by import path (``"module:function"``). It takes a :class:`CheckContext`, does real
work on whatever devices the SDK provides (hardware or emulator: it never asks which), and returns a one-line detail
for the report (``"accuracy 0.97 after 40 steps"``). It raises :class:`CheckSkipped` with a reason when it cannot run
here (a feature not installed, a device that lacks it), and any other exception when the feature is broken.

Example:
    .. code-block:: python

        # my_vendor/selftest.py, named by PluginSpec(selftest="my_vendor.selftest:CHECKS")
        from lightning_accel.core.selftest import Check

        CHECKS = (
            Check("xpu9.fit", "xpu9", "my_vendor._checks:fit", "one device trains a classifier to 90% accuracy"),
            Check("xpu9.graphs", "xpu9", "my_vendor._checks:graphs", "graph replay", {"XPU9_GRAPH_MODE": "1"}),
        )
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

__all__ = ["Check", "CheckContext", "CheckFailed", "CheckResult", "CheckSkipped", "Status"]

Status = Literal["passed", "failed", "skipped"]


class CheckSkipped(Exception):
    """Raised by a check that cannot run here; the message is the reason shown to the user."""


class CheckFailed(AssertionError):
    """Raised by a check whose result is wrong; the message says what was expected and what came out."""


@dataclass(frozen=True)
class Check:
    """One self-test check of a vendor distribution.

    Attributes:
        name: Unique, dotted, starting with the device type (``"hpu.fit"``).
        device_type: The device type it exercises (``"hpu"``); ``--hpu`` selects these.
        target: ``"module:function"``: called with a :class:`CheckContext`, returns a one-line detail.
        description: One line saying what the check shows.
        environment: Variables the SDK reads when it loads (e.g. ``PT_HPU_LAZY_MODE``): the check runs in a process
            started with them. Checks of one device type with the same environment share one process, in order.

    Example:
        >>> Check("hpu.graphs", "hpu", "my_vendor._checks:graphs", "graph replay", {"PT_HPU_LAZY_MODE": "1"}).name
        'hpu.graphs'
    """

    name: str
    device_type: str
    target: str
    description: str
    environment: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class CheckContext:
    """What a check gets to work with.

    Attributes:
        workdir: An empty directory of its own, removed after the run.
        devices: How many devices the plugin's availability reports (real ones, or what the emulator provides).

    Example:
        >>> from pathlib import Path
        >>> CheckContext(workdir=Path("/tmp/check"), devices=8).devices
        8
    """

    workdir: Path
    devices: int


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: The check's name.
        device_type: The check's device type.
        description: The check's description.
        status: ``"passed"``, ``"failed"`` or ``"skipped"``.
        detail: What it measured when it passed, the error when it failed, the reason when it was skipped.
        seconds: Wall time of the check.

    Example:
        >>> CheckResult("hpu.fit", "hpu", "trains", "skipped", "no HPU", 0.0).as_dict()["status"]
        'skipped'
    """

    name: str
    device_type: str
    description: str
    status: Status
    detail: str
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        """The result as plain data for ``--json``."""
        return {
            "name": self.name,
            "device_type": self.device_type,
            "description": self.description,
            "status": self.status,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
        }
