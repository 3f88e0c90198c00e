"""Start-up cost of the autoload hook: interpreter start and `import lightning`, with and without the hook.

"Without" means the hook's .pth file is moved aside (so nothing of lightning-accel runs at start), "with" is the
installed state. Runs are interleaved (A, B, A, B, ...) so that drift on the machine affects both alike; the table
reports medians and their ratio. Run it through `nox -s bench`; results go to benchmarks/results/startup.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
PTH = Path(sysconfig.get_paths()["purelib"]) / "lightning_accel_autoload.pth"


def timed(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return (time.perf_counter() - start) * 1000.0


def interleaved(code: str, runs: int) -> tuple[list[float], list[float]]:
    hidden = PTH.with_suffix(".pth.off")
    with_hook: list[float] = []
    without_hook: list[float] = []
    try:
        for _ in range(runs):
            with_hook.append(timed(code))
            PTH.rename(hidden)
            try:
                without_hook.append(timed(code))
            finally:
                hidden.rename(PTH)
    finally:
        if hidden.exists():
            hidden.rename(PTH)
    return with_hook, without_hook


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs-pass", type=int, default=200)
    parser.add_argument("--runs-import", type=int, default=15)
    args = parser.parse_args()
    if not PTH.exists():
        raise SystemExit(f"{PTH} not found: install lightning-accel-core into this interpreter first")
    cases = {
        "python -c pass": ("pass", args.runs_pass),
        "python -c 'import lightning'": ("import lightning", args.runs_import),
    }
    rows = []
    for label, (code, runs) in cases.items():
        timed(code)  # warm the file-system cache
        with_hook, without_hook = interleaved(code, runs)
        a, b = statistics.median(with_hook), statistics.median(without_hook)
        rows.append(
            {"case": label, "runs": runs, "with_hook_ms": a, "without_hook_ms": b, "added_ms": a - b, "ratio": a / b}
        )
    RESULTS.mkdir(exist_ok=True)
    meta = {"python": sys.version.split()[0], "machine": platform.platform(), "cpus": __import__("os").cpu_count()}
    (RESULTS / "startup.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        "# Start-up with and without the autoload hook",
        "",
        f"Python {meta['python']}, {meta['machine']}, {meta['cpus']} CPUs. Interleaved runs, medians.",
        "",
        "| case | runs | with hook (ms) | without hook (ms) | added (ms) | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        timings = f"{r['with_hook_ms']:.2f} | {r['without_hook_ms']:.2f} | {r['added_ms']:+.2f}"
        lines.append(f"| {r['case']} | {r['runs']} | {timings} | {r['ratio']:.3f} |")
    (RESULTS / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
