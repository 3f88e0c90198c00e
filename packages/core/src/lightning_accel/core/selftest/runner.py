"""Collect the installed plugins' checks and run them, each group in a fresh process.

Why processes: the SDKs read variables such as ``PT_HPU_LAZY_MODE`` once when they load, so a check that needs another
value needs another process; and a check that crashes the interpreter (a driver abort, a hung collective) must not take
the rest of the report with it. Checks of one device type with the same environment share one process, in the order
declared (a DeepSpeed plugin's HPU checks join the Gaudi plugin's), which keeps the interpreter start-ups (torch and
Lightning imports) to a few per run.

Example:
    >>> from lightning_accel.core.selftest import run_selftest
    >>> report = run_selftest(device_types={"hpu"})  # doctest: +SKIP
    >>> report.failed  # doctest: +SKIP
    []
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_accel.core.discovery import discovered_plugins
from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.plugin import Availability, import_target
from lightning_accel.core.selftest.checks import Check, CheckResult

__all__ = ["PlannedCheck", "SelftestReport", "plan_checks", "run_selftest"]

# A whole group (several trainings, a DDP launch) must finish within this; a hung collective must not hang CI.
GROUP_TIMEOUT_S = 900.0
_POLL_S = 0.2


@dataclass(frozen=True)
class PlannedCheck:
    """A check together with the plugin that declared it and that plugin's availability here.

    Example:
        >>> from lightning_accel.core.selftest import plan_checks
        >>> [planned.check.name for planned in plan_checks({"hpu"})]  # doctest: +SKIP
        ['hpu.deepspeed_zero1', ..., 'hpu.compile']
    """

    check: Check
    plugin: str
    availability: Availability


@dataclass(frozen=True)
class SelftestReport:
    """All results of one run, in the order the checks were declared.

    Example:
        >>> SelftestReport(results=(), seconds=0.0).summary()
        {'passed': 0, 'failed': 0, 'skipped': 0, 'total': 0, 'seconds': 0.0}
    """

    results: tuple[CheckResult, ...]
    seconds: float

    @property
    def failed(self) -> list[CheckResult]:
        """The checks that failed."""
        return [result for result in self.results if result.status == "failed"]

    def summary(self) -> dict[str, Any]:
        """Counts per status and the total wall time."""
        counts = {status: 0 for status in ("passed", "failed", "skipped")}
        for result in self.results:
            counts[result.status] += 1
        return {**counts, "total": len(self.results), "seconds": round(self.seconds, 3)}


def plan_checks(device_types: Iterable[str] | None = None) -> list[PlannedCheck]:
    """Every installed plugin's checks, optionally only those of ``device_types``.

    Raises:
        ConfigurationError: When a requested device type has no checks in any installed plugin, or a plugin's
            ``selftest`` does not name a sequence of checks.
    """
    wanted = None if device_types is None else {name.lower() for name in device_types}
    planned: list[PlannedCheck] = []
    for plugin in discovered_plugins():
        if not plugin.spec.selftest:
            continue
        checks = import_target(plugin.spec.selftest)
        if not isinstance(checks, (tuple, list)) or not all(isinstance(check, Check) for check in checks):
            raise ConfigurationError(
                f"Plugin {plugin.name!r} ({plugin.distribution} {plugin.version}) declares selftest="
                f"{plugin.spec.selftest!r}, which is not a sequence of lightning_accel.core.selftest.Check. Upgrade "
                "that distribution, or set LIGHTNING_ACCEL_DISABLE to skip it."
            )
        selected = [check for check in checks if wanted is None or check.device_type in wanted]
        if selected:
            availability = plugin.spec.check_availability()
            planned.extend(PlannedCheck(check, plugin.name, availability) for check in selected)
    missing = sorted((wanted or set()) - {item.check.device_type for item in planned})
    if missing:
        raise ConfigurationError(
            f"selftest --{missing[0]}: no installed plugin has checks for device type {missing[0]!r}. Installed checks "
            f"cover: {', '.join(sorted({item.check.device_type for item in planned})) or 'nothing'}. Install the "
            "vendor distribution (e.g. `pip install 'lightning-accel[habana]'` for --hpu, '[graphcore]' for --ipu)."
        )
    return planned


class _Progress:
    """Receives each check as it starts and each result as it arrives."""

    def __init__(self, callback: Callable[[str, PlannedCheck, CheckResult | None], None] | None) -> None:
        self.callback = callback

    def started(self, item: PlannedCheck) -> None:
        if self.callback is not None:
            self.callback("started", item, None)

    def finished(self, item: PlannedCheck, result: CheckResult) -> None:
        if self.callback is not None:
            self.callback("finished", item, result)


def _result(item: PlannedCheck, status: str, detail: str, seconds: float) -> CheckResult:
    check = item.check
    return CheckResult(check.name, check.device_type, check.description, status, detail, seconds)  # type: ignore[arg-type]


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _stop(process: subprocess.Popen[bytes]) -> None:
    # The group may have started its own processes (a DDP launch): end them all, they are ours.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


def _run_group(items: Sequence[PlannedCheck], workdir: Path, index: int, progress: _Progress) -> list[CheckResult]:
    results_file = workdir / f"group{index}.jsonl"
    log_file = workdir / f"group{index}.log"
    env = dict(os.environ)
    env.update(items[0].check.environment)
    devices = items[0].availability.devices
    command = [
        sys.executable,
        "-m",
        "lightning_accel.core.selftest._worker",
        str(results_file),
        str(devices),
        *(item.check.target for item in items),
    ]
    results: list[CheckResult] = []
    timed_out = False
    start = last = time.perf_counter()
    with log_file.open("wb") as log:
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        progress.started(items[0])
        while len(results) < len(items):
            exited = process.poll() is not None
            lines = results_file.read_text(encoding="utf-8").splitlines() if results_file.exists() else []
            for line in lines[len(results) :]:
                if not line.endswith("}"):
                    break  # still being written
                outcome = json.loads(line)
                item = items[len(results)]
                results.append(_result(item, outcome["status"], outcome["detail"], outcome["seconds"]))
                progress.finished(item, results[-1])
                last = time.perf_counter()
                if len(results) < len(items):
                    progress.started(items[len(results)])
            if exited:
                break
            if time.perf_counter() - start > GROUP_TIMEOUT_S:
                timed_out = True
                break
            time.sleep(_POLL_S)
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None
        if timed_out or code is None:
            _stop(process)
    for item in items[len(results) :]:
        if timed_out:
            why = f"did not finish within {GROUP_TIMEOUT_S:.0f} s (its process was stopped)"
        else:
            why = f"its process exited with code {code} before the check reported"
        detail = f"{why}; the last lines it printed:\n{_tail(log_file)}"
        results.append(_result(item, "failed", detail, time.perf_counter() - last))
        progress.finished(item, results[-1])
        last = time.perf_counter()
    return results


def run_selftest(
    device_types: Iterable[str] | None = None,
    progress: Callable[[str, PlannedCheck, CheckResult | None], None] | None = None,
) -> SelftestReport:
    """Run the checks of every installed plugin (or those of ``device_types``) and return the report.

    Checks of a plugin whose devices are unavailable are reported skipped with the plugin's reason.

    Args:
        device_types: Device types to check (``{"hpu"}``); ``None`` for all.
        progress: Called with ``("started", planned, None)`` and ``("finished", planned, result)``.
    """
    start = time.perf_counter()
    planned = plan_checks(device_types)
    tracker = _Progress(progress)
    by_name: dict[str, CheckResult] = {}
    groups: dict[tuple[Any, ...], list[PlannedCheck]] = {}
    for item in planned:
        # An unavailable plugin's checks are reported where they stand, without a process.
        usable = item.availability.usable
        environment = tuple(sorted(item.check.environment.items()))
        key = (item.check.device_type, item.availability.devices, environment) if usable else ("", item.check.name)
        groups.setdefault(key, []).append(item)
    with tempfile.TemporaryDirectory(prefix="lightning-accel-selftest-") as tmp:
        for index, items in enumerate(groups.values()):
            if not items[0].availability.usable:
                tracker.started(items[0])
                by_name[items[0].check.name] = _result(items[0], "skipped", items[0].availability.reason, 0.0)
                tracker.finished(items[0], by_name[items[0].check.name])
                continue
            for result in _run_group(items, Path(tmp), index, tracker):
                by_name[result.name] = result
    ordered = tuple(by_name[item.check.name] for item in planned)
    return SelftestReport(results=ordered, seconds=time.perf_counter() - start)
