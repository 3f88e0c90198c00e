"""The process that runs a group of checks: ``python -m lightning_accel.core.selftest._worker RESULTS DEVICES T...``.

Each check's result is appended to RESULTS as one JSON line as soon as it is known, so that the parent can show
progress and, if this process dies, knows which checks it finished.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

from lightning_accel.core.plugin import import_target
from lightning_accel.core.selftest.checks import CheckContext, CheckSkipped


def _run_one(target: str, devices: int, parent: Path) -> dict[str, object]:
    start = time.perf_counter()
    # Inside the parent's folder, which the parent removes even when a check kills this process.
    with tempfile.TemporaryDirectory(prefix="check-", dir=parent) as workdir:
        try:
            detail = str(import_target(target)(CheckContext(workdir=Path(workdir), devices=devices)) or "")
            status = "passed"
        except CheckSkipped as exc:
            status, detail = "skipped", str(exc)
        except BaseException as exc:  # a report must name every failure, whatever it raised
            if isinstance(exc, KeyboardInterrupt):
                raise
            status = "failed"
            # Where it broke, in one line: the whole traceback would drown the report.
            where = traceback.extract_tb(exc.__traceback__)[-1]
            detail = f"{type(exc).__name__}: {exc}\n(raised at {where.filename}:{where.lineno} in {where.name})"
    return {"target": target, "status": status, "detail": detail, "seconds": time.perf_counter() - start}


def main(argv: list[str]) -> int:
    results, devices, targets = Path(argv[0]), int(argv[1]), argv[2:]
    for target in targets:
        outcome = _run_one(target, devices, results.parent)
        with results.open("a", encoding="utf-8") as out:
            out.write(json.dumps(outcome) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
