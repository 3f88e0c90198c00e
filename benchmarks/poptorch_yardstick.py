"""poptorch's own test files, run against the poptorch emulator: which pass, which fail, and how long each takes.

The tests are read from a local poptorch checkout or git mirror (``--source``, by default the mirror this project's
machines keep), at tag ``sdk/poptorch/3.4.0`` when the mirror has it (the release the emulator follows), into a
temporary folder, and each chosen file runs in a pytest process of its own under ``LIGHTNING_ACCEL_EMULATE=ipu``, so
that ``import poptorch`` is the emulator. Nothing of poptorch's is changed or kept: the folder is deleted afterwards.
Results: ``benchmarks/results/<name>.json`` (every test) and ``<name>.md``.

Each test is classified: passed, failed, error (in a fixture), skipped, timeout (past ``--timeout``), or, for a
failure that cannot be the emulator's to fix, "needs hardware logs" (the test reads the log lines of poptorch's C++
core or of its worker process, through ``helpers.LogChecker`` and the like) or "not emulated" (it uses a name that
``left_out.py`` lists). Outside CI: it needs the mirror, and exits 2 when there is none.

Example::

    python benchmarks/poptorch_yardstick.py dataloader_test.py --timeout 120
    python benchmarks/poptorch_yardstick.py dataloader_test.py options_test.py --name poptorch_yardstick_before
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
MIRROR = Path("/work/.mirror/graphcore+poptorch/repo")
TAG = "sdk/poptorch/3.4.0"
CATEGORIES = ("passed", "failed", "error", "skipped", "timeout", "needs hardware logs", "not emulated")
# A failure whose traceback matches is no emulator bug: the test reads what only poptorch's C++ core or its worker
# process prints (helpers.LogChecker over capfd, POPTORCH_LOG_LEVEL lines, the worker's PID in its debug log).
HARDWARE_LOGS = re.compile(
    r"\bLog(?:Checker|Iterator)\b|PID could not be captured|POPTORCH_LOG_LEVEL|overridePoptorchLogLevel"
)
NOT_EMULATED = re.compile(r"poptorch\.\w+(?:\.\w+)* is not emulated: ")


def classify(record: dict[str, Any]) -> str:
    """The category of one test's record (as the plugin writes it)."""
    if record.get("timed_out"):
        return "timeout"
    outcome = str(record["outcome"])
    if outcome in ("passed", "skipped"):
        return outcome
    text = f"{record.get('longrepr', '')}\n{record.get('message', '')}"
    if NOT_EMULATED.search(text):
        return "not emulated"
    if HARDWARE_LOGS.search(text):
        return "needs hardware logs"
    return outcome


def _git(source: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(source), *args], capture_output=True, check=False)


def extract_tests(source: Path, ref: str | None, into: Path) -> str:
    """Copy poptorch's ``tests/`` from ``source`` into ``into``; return what was read (a ref and commit, or a path).

    ``source`` is a git repository, bare or not, read at ``ref``, else at the 3.4.0 tag when it has one (the release
    the emulator follows, whatever the work tree holds), else at HEAD; or a copy of poptorch's sources outside git,
    whose ``tests/`` is copied as it is.
    """
    bare = _git(source, "rev-parse", "--is-bare-repository").stdout.strip() == b"true"
    if not bare and not (source / ".git").exists():  # (not a folder inside some other repository's work tree)
        if ref is None and (source / "tests" / "conftest.py").is_file():
            shutil.copytree(source / "tests", into / "tests")
            return str(source / "tests")
        raise SystemExit(f"{source} is neither a git repository nor a copy of poptorch (no tests/conftest.py)")
    if ref is None:
        ref = TAG if _git(source, "rev-parse", "--verify", "--quiet", f"refs/tags/{TAG}").returncode == 0 else "HEAD"
    archive = _git(source, "archive", "--format=tar", ref, "tests")
    if archive.returncode != 0:
        raise SystemExit(f"git archive {ref} tests in {source} failed: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        # Plain files and folders inside ``into`` only: git's archive holds nothing else, and tarfile's "data" filter
        # (where this Python has it) refuses anything else too.
        members = [m for m in tar.getmembers() if (m.isfile() or m.isdir()) and not Path(m.name).is_absolute()]
        members = [m for m in members if ".." not in Path(m.name).parts]
        safe: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(into, members=members, **safe)
    commit = _git(source, "rev-parse", f"{ref}^{{commit}}").stdout.decode().strip()
    return f"{ref} ({commit[:12]})"


def emulator_version() -> str:
    """Where the emulator that ``import poptorch`` will find lives, and its commit when that is a git work tree."""
    spec = importlib.util.find_spec("lightning_accel.poptorch_emulator")
    if spec is None or not spec.submodule_search_locations:
        return "(not installed)"
    folder = Path(next(iter(spec.submodule_search_locations)))
    commit = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if commit.returncode != 0:
        return f"at {folder}"
    dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--", "."], capture_output=True)
    return f"of commit {commit.stdout.strip()}{' with changes' if dirty.stdout.strip() else ''} ({folder})"


def run_file(tests: Path, name: str, timeout: float, file_timeout: float, extra: list[str]) -> dict[str, Any]:
    """Run one test file in a pytest process of its own; its tests' records and its wall time."""
    report = tests / f".yardstick-{name}.jsonl"
    report.unlink(missing_ok=True)
    env = dict(os.environ)
    env["LIGHTNING_ACCEL_EMULATE"] = "ipu"
    env.setdefault("OMP_NUM_THREADS", "1")  # two cores shared: torch's one thread per core would spin-wait
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    # poptorch's tests start "python3 -m pytest" for some cases: as in an activated environment, that must be this
    # interpreter (with torch and the emulator), not whatever python3 comes first on PATH.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["POPTORCH_YARDSTICK_TIMEOUT"] = str(timeout)
    env["POPTORCH_YARDSTICK_REPORT"] = str(report)
    command = [sys.executable, "-m", "pytest", name, "-q", "-p", "no:cacheprovider", "-p", "poptorch_yardstick_plugin"]
    start = time.monotonic()
    # A session of its own, so that a file past its limit is stopped with every process it started.
    with subprocess.Popen(
        [*command, *extra], cwd=tests, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    ) as process:
        try:
            output, _ = process.communicate(timeout=file_timeout or None)
            file_timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            file_timed_out = True
    seconds = time.monotonic() - start
    records = []
    if report.is_file():
        records = [json.loads(line) for line in report.read_text(encoding="utf-8").splitlines() if line.strip()]
    for record in records:
        record["category"] = classify(record)
        record.pop("longrepr", None)  # the message says enough in the results; the traceback is in the output
    text = output.decode(errors="replace")
    return {
        "file": name,
        "seconds": round(seconds, 1),
        "exit_code": None if file_timed_out else process.returncode,
        "file_timed_out": file_timed_out,
        "counts": dict(Counter(record["category"] for record in records)),
        "tests": records,
        "summary": text.strip().splitlines()[-1] if text.strip() else "",
        # Collection errors and crashes leave no records: the end of the output says what happened.
        "output_tail": "" if records else text[-3000:],
    }


def markdown(meta: dict[str, Any], files: list[dict[str, Any]], slowest: int) -> str:
    """The results as a page: one row per file, then each file's slowest tests and the tests that did not pass."""
    lines = [
        "# poptorch's own tests on the emulator",
        "",
        f"poptorch's `tests/` from {meta['source']} at {meta['read']}, run by `benchmarks/poptorch_yardstick.py` on "
        f"the emulator {meta['emulator']} ({meta['date']}), one pytest process per file, "
        f"OMP_NUM_THREADS={meta['omp_threads']}, at most {meta['timeout']:g} s per test"
        + (f" and {meta['file_timeout']:g} s per file" if meta["file_timeout"] else "")
        + ". Times are wall-clock seconds on this project's 2-core machine, beside other work.",
        "",
        "| file | tests | " + " | ".join(CATEGORIES) + " | seconds |",
        "| --- | --- | " + " | ".join("---" for _ in CATEGORIES) + " | --- |",
    ]
    for entry in files:
        counts = entry["counts"]
        timed_out = " (stopped at the file's limit)" if entry["file_timed_out"] else ""
        cells = " | ".join(str(counts.get(category, 0)) for category in CATEGORIES)
        lines.append(f"| {entry['file']} | {len(entry['tests'])} | {cells} | {entry['seconds']:.1f}{timed_out} |")
    for entry in files:
        lines += ["", f"## {entry['file']}", "", f"pytest: `{entry['summary']}`"]
        if entry["output_tail"]:
            lines += ["", "No test finished; the end of the output:", "", "```", entry["output_tail"].strip(), "```"]
        ranked = sorted(entry["tests"], key=lambda record: -record["seconds"])[:slowest]
        if ranked:
            lines += ["", f"Slowest {len(ranked)}:", "", "| test | seconds | result |", "| --- | --- | --- |"]
            lines += [f"| `{_test(r)}` | {r['seconds']:.2f} | {r['category']} |" for r in ranked]
        others = [record for record in entry["tests"] if record["category"] != "passed"]
        if others:
            lines += ["", "Not passed:", "", "| test | result | message |", "| --- | --- | --- |"]
            for record in sorted(others, key=lambda r: (r["category"], r["nodeid"])):
                message = " ".join(str(record["message"]).split())[:200].replace("|", "\\|")
                lines.append(f"| `{_test(record)}` | {record['category']} | {message} |")
    return "\n".join(lines) + "\n"


def _test(record: dict[str, Any]) -> str:
    return str(record["nodeid"]).partition("::")[2] or str(record["nodeid"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("files", nargs="*", default=["dataloader_test.py"], help="files of poptorch's tests/")
    parser.add_argument("--source", type=Path, default=MIRROR, help=f"poptorch checkout or git mirror ({MIRROR})")
    parser.add_argument("--ref", help=f"git ref to read (default {TAG} if the mirror has it, else HEAD)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test (0: none)")
    parser.add_argument("--file-timeout", type=float, default=3600.0, help="seconds per file (0: none)")
    parser.add_argument("--name", default="poptorch_yardstick", help="results/<name>.json and .md")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--slowest", type=int, default=10, help="slowest tests listed per file")
    parser.add_argument("--note", help="how to name the emulator in the results (default: its folder and commit)")
    parser.add_argument("--pytest-args", default="", help='more pytest arguments, e.g. "-k test_simple"')
    args = parser.parse_args(argv)
    if not args.source.exists():
        print(
            f"poptorch's sources are not at {args.source}: pass a poptorch checkout or git mirror with --source "
            "(this yardstick runs outside CI, on a machine that keeps the mirror).",
            file=sys.stderr,
        )
        return 2
    # Named before the run: the tree may change while it runs (a child process imports what is there then).
    emulator = args.note or emulator_version()
    with tempfile.TemporaryDirectory(prefix="poptorch-yardstick-") as folder:
        read = extract_tests(args.source, args.ref, Path(folder))
        tests = Path(folder) / "tests"
        missing = [name for name in args.files if not (tests / name).is_file()]
        if missing:
            print(f"not in poptorch's tests/ at {read}: {', '.join(missing)}", file=sys.stderr)
            return 2
        files = []
        for name in args.files:
            print(f"{name} ...", flush=True)
            entry = run_file(tests, name, args.timeout, args.file_timeout, shlex.split(args.pytest_args))
            print(f"{name}: {entry['counts']} in {entry['seconds']:.1f} s ({entry['summary']})", flush=True)
            files.append(entry)
    meta = {
        "source": str(args.source),
        "read": read,
        "emulator": emulator,
        "date": time.strftime("%Y-%m-%d"),
        "timeout": args.timeout,
        "file_timeout": args.file_timeout,
        "omp_threads": os.environ.get("OMP_NUM_THREADS", "1"),
        "pytest_args": args.pytest_args,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{args.name}.json").write_text(json.dumps({"meta": meta, "files": files}, indent=1) + "\n")
    (args.results / f"{args.name}.md").write_text(markdown(meta, files, args.slowest))
    print(f"written: {args.results / args.name}.json, .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
