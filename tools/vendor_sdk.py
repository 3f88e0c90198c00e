"""How ``nox -s hpu_tests`` / ``ipu_tests`` run: on the vendor's SDK where a machine has it, on the emulator elsewhere.

A Gaudi or IPU machine ships its own Python with the vendor's torch and SDK in the system site-packages. The session
must use that interpreter (a venv with ``--system-site-packages``), install nothing that replaces its torch, turn
emulation off, take the device count from the SDK and, for Gaudi, run in both ``PT_HPU_LAZY_MODE`` values. Elsewhere
the session is as before: Python 3.11, ``torch==2.13.0``, the emulator.

Detection: ``LIGHTNING_ACCEL_SDK_PYTHON`` names the interpreter; otherwise ``python3`` and ``python`` on ``PATH`` are
tried. An interpreter has the SDK when it imports it (``habana_frameworks.torch`` / ``poptorch``) with emulation off.
An explicit ``LIGHTNING_ACCEL_EMULATE`` naming the device type wins: the session then runs on the emulator.

Importable without nox, so that its decisions are tested (``tests/test_vendor_sessions.py``).

Example:
    >>> plan = plan_session("hpu", {"PATH": ""})
    >>> plan.hardware, plan.python, plan.runs
    (False, '3.11', ({'LIGHTNING_ACCEL_EMULATE': 'hpu'},))
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["SDK_PYTHON_VAR", "SDKS", "SdkInterpreter", "SessionPlan", "VendorSdk", "find_sdk", "plan_session"]

SDK_PYTHON_VAR = "LIGHTNING_ACCEL_SDK_PYTHON"
EMULATE_VAR = "LIGHTNING_ACCEL_EMULATE"
# Tests that start several processes on hardware read the device count the SDK reported from this variable.
DEVICES_VAR = "LIGHTNING_ACCEL_SDK_DEVICES"
EMULATOR_PYTHON = "3.11"
EMULATOR_TORCH = "torch==2.13.0"


@dataclass(frozen=True)
class VendorSdk:
    """A vendor SDK as the sessions look for it.

    Attributes:
        device_type: ``"hpu"`` or ``"ipu"``.
        module: What an interpreter with the SDK imports.
        distribution: The SDK's distribution, for its version.
        count: Python code that sets ``n`` to the number of devices the SDK sees (run after ``import torch``).
        modes: One environment per pytest run (the SDK reads them once per process).
    """

    device_type: str
    module: str
    distribution: str
    count: str
    modes: tuple[Mapping[str, str], ...]


SDKS = {
    # habana_frameworks.torch.hpu.device_count(): the bridge's count of acquired-able Gaudi modules.
    # PT_HPU_LAZY_MODE: read once when the bridge loads (1.21+: 0 = eager, the default; 1 = lazy).
    "hpu": VendorSdk(
        "hpu",
        "habana_frameworks.torch",
        "habana-torch-plugin",
        "import habana_frameworks.torch.hpu as _h; n = _h.device_count()",
        ({"PT_HPU_LAZY_MODE": "0"}, {"PT_HPU_LAZY_MODE": "1"}),
    ),
    # poptorch.ipuHardwareIsAvailable(num_ipus): whether that many IPUs can be attached (poptorch/__init__.py); probed
    # by powers of two up to 64, as lightning_accel.graphcore.sdk.available_ipus does.
    "ipu": VendorSdk(
        "ipu",
        "poptorch",
        "poptorch",
        "import poptorch as _p\nsize = 1\n"
        "while size <= 64 and _p.ipuHardwareIsAvailable(size):\n    n, size = size, size * 2",
        ({},),
    ),
}

_PROBE = """
import importlib, importlib.metadata, importlib.util, json, sys
module, distribution, count = sys.argv[1:4]
if importlib.util.find_spec(module.split(".")[0]) is None:
    sys.exit(3)
import torch
importlib.import_module(module)
n = 0
exec(count)
try:
    version = importlib.metadata.version(distribution)
except importlib.metadata.PackageNotFoundError:
    version = None
print(json.dumps({"python": sys.executable, "torch": torch.__version__, "sdk": version, "devices": int(n)}))
"""


@dataclass(frozen=True)
class SdkInterpreter:
    """An interpreter that imports the vendor SDK, and what it reported."""

    python: str
    torch: str
    sdk: str | None
    devices: int


@dataclass(frozen=True)
class SessionPlan:
    """What a vendor test session does.

    Attributes:
        device_type: ``"hpu"`` or ``"ipu"``.
        hardware: Whether it runs on the vendor's SDK.
        python: The interpreter for nox: a path on a vendor machine, else ``"3.11"``.
        venv_params: Extra arguments for the venv (``--system-site-packages`` to see the SDK's torch).
        torch: The torch requirement to install first, or ``None`` (the SDK's torch is used as it is).
        constraints: Lines of a pip constraints file that keep the installed torch, or ``()``.
        runs: The environment of each pytest run.
        lightning: The Lightning requirement when the default (2.6) cannot run on the SDK's torch, else ``None``.
        reason: One line for the session log: what was found and why this plan.
    """

    device_type: str
    hardware: bool
    python: str
    venv_params: tuple[str, ...]
    torch: str | None
    constraints: tuple[str, ...]
    runs: tuple[dict[str, str], ...]
    reason: str
    lightning: str | None = None

    def install_commands(self, *requirements: str) -> list[list[str]]:
        """The pip arguments for ``session.install``: torch first (emulator only), then ``requirements`` constrained."""
        commands = [[self.torch]] if self.torch else []
        if requirements:
            commands.append(["-c", "{constraints}", *requirements] if self.constraints else list(requirements))
        return commands


def _candidates(environ: Mapping[str, str]) -> list[str]:
    explicit = environ.get(SDK_PYTHON_VAR, "").strip()
    if explicit:
        return [explicit]
    found: list[str] = []
    for name in ("python3", "python"):
        path = shutil.which(name, path=environ.get("PATH", ""))
        if path and path not in found:
            found.append(path)
    return found


def probe(python: str, sdk: VendorSdk, environ: Mapping[str, str]) -> SdkInterpreter | None:
    """Ask ``python`` whether it imports the SDK with emulation off; its answer, or ``None``."""
    env = {k: v for k, v in environ.items() if not k.startswith("LIGHTNING_ACCEL_")}
    env[EMULATE_VAR] = "0"  # our emulator must not answer for the SDK's names
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, sdk.module, sdk.distribution, sdk.count],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return SdkInterpreter(python=python, torch=answer["torch"], sdk=answer["sdk"], devices=answer["devices"])


def find_sdk(device_type: str, environ: Mapping[str, str] | None = None) -> SdkInterpreter | None:
    """The first candidate interpreter that imports ``device_type``'s SDK, or ``None``.

    Raises:
        ValueError: When ``LIGHTNING_ACCEL_SDK_PYTHON`` names an interpreter that imports no vendor SDK at all.
    """
    environ = os.environ if environ is None else environ
    sdk = SDKS[device_type]
    for python in _candidates(environ):
        found = probe(python, sdk, environ)
        if found is not None:
            return found
    explicit = environ.get(SDK_PYTHON_VAR, "").strip()
    if explicit and not any(probe(explicit, other, environ) for other in SDKS.values() if other is not sdk):
        raise ValueError(
            f"{SDK_PYTHON_VAR}={explicit!r} imports no vendor SDK ({', '.join(s.module for s in SDKS.values())}) "
            "with LIGHTNING_ACCEL_EMULATE=0. Accepted: the path of the Python that has the SDK (on a Gaudi image "
            "usually /usr/bin/python3); unset it to look on PATH."
        )
    return None


def _lightning_for(torch_version: str) -> str | None:
    # Lightning 2.4+ needs torch >= 2.1; the last poptorch (3.4) ships torch 2.0.1, whose newest Lightning is 2.3.
    major, minor = (int(part) for part in torch_version.split("+")[0].split(".")[:2])
    return "lightning==2.3.3" if (major, minor) < (2, 1) else None


def _emulator_plan(device_type: str, reason: str) -> SessionPlan:
    # Emulation of this device type, whatever else the caller's environment asks for.
    runs = ({EMULATE_VAR: device_type},)
    return SessionPlan(device_type, False, EMULATOR_PYTHON, (), EMULATOR_TORCH, (), runs, reason)


def plan_session(device_type: str, environ: Mapping[str, str] | None = None) -> SessionPlan:
    """Decide how the ``<device_type>_tests`` session runs on this machine."""
    environ = os.environ if environ is None else environ
    requested = {part.strip().lower() for part in environ.get(EMULATE_VAR, "").split(",")}
    if device_type in requested or "all" in requested:
        return _emulator_plan(device_type, f"{EMULATE_VAR}={environ[EMULATE_VAR]!r}: on the emulator, as asked")
    found = find_sdk(device_type, environ)
    sdk = SDKS[device_type]
    if found is None:
        return _emulator_plan(device_type, f"no interpreter imports {sdk.module}: on the emulator")
    runs = tuple({EMULATE_VAR: "0", DEVICES_VAR: str(found.devices), **mode} for mode in sdk.modes)
    return SessionPlan(
        device_type=device_type,
        hardware=True,
        python=found.python,
        venv_params=("--system-site-packages",),
        torch=None,
        constraints=(f"torch=={found.torch}",),
        runs=runs,
        lightning=_lightning_for(found.torch),
        reason=(
            f"{found.python} imports {sdk.module} ({sdk.distribution} {found.sdk or '?'}, torch {found.torch}, "
            f"{found.devices} device(s)): on the SDK, emulation off, its torch kept"
        ),
    )
