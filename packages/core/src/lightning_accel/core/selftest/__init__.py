"""``lightning-accel selftest``: packaged checks that an installation trains correctly on the devices present.

Each vendor distribution names its checks in its :class:`~lightning_accel.core.PluginSpec` (``selftest=``); the core
collects them, runs them in fresh processes and reports each as passed, failed (with the error) or skipped (with the
reason), with its wall time. The checks run on whatever the SDK provides, real hardware or its emulator.

Example:
    .. code-block:: console

        $ lightning-accel selftest --hpu
        $ lightning-accel selftest --json > selftest.json
"""

from lightning_accel.core.selftest.checks import Check, CheckContext, CheckFailed, CheckResult, CheckSkipped, Status
from lightning_accel.core.selftest.runner import PlannedCheck, SelftestReport, plan_checks, run_selftest

__all__ = [
    "Check",
    "CheckContext",
    "CheckFailed",
    "CheckResult",
    "CheckSkipped",
    "PlannedCheck",
    "SelftestReport",
    "Status",
    "plan_checks",
    "run_selftest",
]
