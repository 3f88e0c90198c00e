"""The emulated HPU device's build never blocks a later start (issue 48, item 4).

Each test builds in real processes into a cache folder of its own (``LIGHTNING_ACCEL_CACHE_DIR`` under ``tmp_path``),
never the shared one. Most use a stand-in compiler (a shell script) so that no test compiles the device for minutes:
the build is the real one (the lock, ninja, the progress, the error) up to what the compiler does.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from lightning_accel import emulated_hpu

PYTHON = sys.executable
LOAD = "from lightning_accel import emulated_hpu\nemulated_hpu.load()\nprint('loaded')\n"
CSRC = Path(emulated_hpu.__file__).parent / "csrc"
UNITS = sorted(path.relative_to(CSRC).as_posix() for path in CSRC.rglob("*.cpp"))
BOUND = 600  # seconds: a step that takes longer hangs (the test fails instead of waiting forever)
ON_LINUX = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc; the build stops its compilers with PR_SET_PDEATHSIG"
)

# A compiler that writes the object or library it is asked for, except that the link fails with an error line.
LINK_FAILS = """#!/bin/sh
out=""; shared=0
while [ $# -gt 0 ]; do
  case "$1" in -o) shift; out="$1";; -shared) shared=1;; esac
  shift
done
if [ "$shared" = 1 ]; then
  echo "stand-in linker: linking $out"
  echo "stand-in linker: error: cannot link (test)" >&2
  exit 1
fi
: > "$out"
"""
# A compiler that compiles for as long as it is let.
NEVER_ENDS = "#!/bin/sh\nexec sleep 3600\n"


def _env(cache: Path | None, **extra: str) -> dict[str, str]:
    """The environment of a build process: no emulation (nothing loads at `import torch`), no build setting."""
    settings = ("CXX", "MAX_JOBS", "TORCH_EXTENSIONS_DIR", "LIGHTNING_ACCEL_CACHE_DIR", "LIGHTNING_ACCEL_BUILD_WAIT")
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("LIGHTNING_ACCEL_EMULATE", "PT_HPU_")) and name not in settings
    }
    if cache is not None:
        env["LIGHTNING_ACCEL_CACHE_DIR"] = str(cache)
    env.update(extra)
    return env


def _run(env: dict[str, str], code: str = LOAD) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=BOUND)


def _script(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _entry(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The build folder ``cache`` holds for these sources (as the build process computes it)."""
    with monkeypatch.context() as patch:
        patch.setenv("LIGHTNING_ACCEL_CACHE_DIR", str(cache))
        return emulated_hpu.cache_dir()


def _lines(process: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's stderr, line by line, as it comes."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    return lines


def _wait_for_line(lines: queue.Queue[str], text: str) -> None:
    seen: list[str] = []
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        if text in line:
            return
    pytest.fail(f"no line with {text!r} within {BOUND} s; the process printed:\n" + "\n".join(seen[-30:]))


def _wait_until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    pytest.fail(f"{what}: not within {BOUND} s")


def _processes_in(folder: Path) -> list[str]:
    """The processes (``pid name``) whose working folder is in ``folder``: ninja and the compilers it runs."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            name = (entry / "comm").read_text().strip()
        except OSError:  # gone, a zombie, or not ours to read
            continue
        if cwd == str(folder) or cwd.startswith(str(folder) + os.sep):
            found.append(f"{entry.name} {name}")
    return found


def _start(env: dict[str, str]) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    process = subprocess.Popen(
        [PYTHON, "-c", LOAD],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, _lines(process)


def _leftovers(entry: Path) -> list[str]:
    return sorted(p.name for p in entry.parent.iterdir() if p.name.startswith(entry.name + ".building-"))


@ON_LINUX
def test_a_build_killed_while_compiling_stops_its_compilers_and_the_next_start_recovers_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    entry = _entry(cache, monkeypatch)
    # A compiler that never finishes: an orphan would go on "compiling" past the bound below, whatever the timing.
    compiler = _script(tmp_path, "never-ends-c++", NEVER_ENDS)
    first, lines = _start(_env(cache, CXX=compiler, MAX_JOBS="1"))
    try:
        _wait_for_line(lines, "C++ units and a link")
        # Killed once a compiler runs: the lock is held and a unit is being compiled.
        _wait_until(lambda: [p for p in _processes_in(cache) if not p.endswith(" ninja")], "a compiler to start")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=BOUND)
    finally:
        if first.poll() is None:
            first.kill()
    assert len(_leftovers(entry)) == 1
    # The killed build's ninja and compilers stop with it (no orphan goes on compiling). What is left is the
    # unfinished folder and the lock's record, no cache entry.
    _wait_until(lambda: not _processes_in(cache), "the killed build's ninja and compilers to stop")
    assert not entry.exists()
    assert f"pid={first.pid} " in (entry.parent / f"{entry.name}.lock").read_text()

    second = _run(_env(cache, CXX="/bin/false"))

    assert second.returncode == 1, second.stderr
    assert f"lightning-accel: the previous build (pid {first.pid} on host " in second.stderr
    assert "was interrupted; building again." in second.stderr
    assert "DeviceBuildError: Building the emulated HPU device failed: the command\n  /bin/false " in second.stderr
    assert _leftovers(entry) == []
    assert (entry.parent / f"{entry.name}.lock").read_text() == ""


@ON_LINUX
def test_a_start_waits_for_a_running_build_within_a_bound_then_names_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    entry = _entry(cache, monkeypatch)
    compiler = _script(tmp_path, "never-ends-c++", NEVER_ENDS)
    first, lines = _start(_env(cache, CXX=compiler))
    try:
        _wait_for_line(lines, "C++ units and a link")

        second = _run(_env(cache, CXX=compiler, LIGHTNING_ACCEL_BUILD_WAIT="1"))

        assert second.returncode == 1, second.stderr
        lock = entry.parent / f"{entry.name}.lock"
        assert f"lightning-accel: waiting for the build of the emulated HPU device by pid {first.pid} on host " in (
            second.stderr
        )
        message = second.stderr[second.stderr.index("DeviceBuildError: ") :]
        assert message.startswith(
            f"DeviceBuildError: Another process is building the emulated HPU device (pid {first.pid} on host "
        )
        assert f"still holds the build lock {lock} after 1 s of waiting (LIGHTNING_ACCEL_BUILD_WAIT)." in message
        assert f"delete {lock} and start again; to wait longer, raise LIGHTNING_ACCEL_BUILD_WAIT" in message
        # As `timeout` ends a command: SIGTERM, which Python does not catch. Its compiler stops with it.
        first.terminate()
        first.wait(timeout=BOUND)
    finally:
        if first.poll() is None:
            first.kill()
    _wait_until(lambda: not _processes_in(cache), "the ended build's ninja and compiler to stop")


def test_a_failing_compiler_is_a_device_build_error_naming_the_command(tmp_path: Path) -> None:
    cache = tmp_path / "cache"

    result = _run(_env(cache, CXX="/bin/false"))

    assert result.returncode == 1
    assert "CalledProcessError" not in result.stderr
    message = result.stderr[result.stderr.index("DeviceBuildError: ") :]
    # With parallel jobs (ninja's default depends on the machine's cores) any unit's command may fail first.
    any_unit = "(?:" + "|".join(re.escape(str(CSRC / unit)) for unit in UNITS) + ")"
    assert re.match(
        r"DeviceBuildError: Building the emulated HPU device failed: the command\n  /bin/false -D\S+ .* -c "
        rf"{any_unit} -o \S+\.o\nfailed and printed nothing\nThe compiler is CXX='/bin/false' \(unset CXX for "
        r"c\+\+\)\. Fix the cause and start again; nothing was cached\.",
        message,
    ), message
    assert [p.name for p in (cache / "habana-emulator").iterdir()] == [
        p.name for p in (cache / "habana-emulator").glob("*.lock")
    ]


def test_progress_is_one_line_per_unit_with_parallel_jobs_and_the_first_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    entry = _entry(cache, monkeypatch)
    compiler = _script(tmp_path, "stand-in-c++", LINK_FAILS)

    result = _run(_env(cache, CXX=compiler, MAX_JOBS="3"))

    assert result.returncode == 1
    total = len(UNITS) + 1
    assert (
        f"lightning-accel: building the emulated HPU device for torch {torch.__version__} (once; "
        f"cached in {entry}, LIGHTNING_ACCEL_CACHE_DIR): {len(UNITS)} C++ units and a link, 3 parallel jobs "
        "(MAX_JOBS=3)..."
    ) in result.stderr
    progress = re.findall(r"^lightning-accel: \[(\d+)/(\d+)\] (.*) \(\d+ s\)$", result.stderr, re.MULTILINE)
    assert [(int(done), int(of)) for done, of, _ in progress] == [(n, total) for n in range(1, total + 1)]
    assert sorted(step for _, _, step in progress[:-1]) == [f"compiled {unit}" for unit in UNITS]
    name = f"lightning_accel_hpu_device_{entry.name.rsplit('-', 1)[-1]}.so"
    assert progress[-1][2] == f"linking {name} failed"
    message = result.stderr[result.stderr.index("DeviceBuildError: ") :]
    assert message.startswith(f"DeviceBuildError: Building the emulated HPU device failed: the command\n  {compiler} ")
    assert f" -o {name}\nfailed with: stand-in linker: error: cannot link (test)\nIts output:\n" in message


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("MAX_JOBS", "two", "DeviceBuildError: MAX_JOBS='two' is not a number of parallel compile jobs. Set it to a "),
        ("MAX_JOBS", "0", "DeviceBuildError: MAX_JOBS='0' is not a number of parallel compile jobs."),
        (
            "LIGHTNING_ACCEL_BUILD_WAIT",
            "soon",
            "DeviceBuildError: LIGHTNING_ACCEL_BUILD_WAIT='soon' is not a number of seconds. Set it to how long ",
        ),
    ],
)
def test_a_bad_build_setting_is_refused_by_name(tmp_path: Path, setting: str, value: str, message: str) -> None:
    result = _run(_env(tmp_path / "cache", CXX="/bin/false", **{setting: value}))

    assert result.returncode == 1
    assert message in result.stderr


def test_torch_extensions_dir_holds_the_build_unless_lightning_accel_cache_dir_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extensions, own = tmp_path / "torch-extensions", tmp_path / "own"
    monkeypatch.delenv("LIGHTNING_ACCEL_CACHE_DIR", raising=False)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    assert emulated_hpu.cache_dir().parent == extensions / "habana-emulator"
    monkeypatch.setenv("LIGHTNING_ACCEL_CACHE_DIR", str(own))
    assert emulated_hpu.cache_dir().parent == own / "habana-emulator"
    monkeypatch.delenv("LIGHTNING_ACCEL_CACHE_DIR")
    entry = emulated_hpu.cache_dir()

    result = _run(_env(None, TORCH_EXTENSIONS_DIR=str(extensions), CXX="/bin/false"))

    assert result.returncode == 1
    assert f"(once; cached in {entry}, TORCH_EXTENSIONS_DIR)" in result.stderr
    assert (entry.parent / f"{entry.name}.lock").is_file()


def test_no_compiler_at_import_torch_raises_the_build_error_at_the_first_hpu_tensor(tmp_path: Path) -> None:
    code = (
        "import torch\n"
        "try:\n"
        "    torch.ones(2, device='hpu')\n"
        "except Exception as error:\n"
        "    print(f'{type(error).__name__}: {error}')\n"
    )

    result = _run(_env(tmp_path / "cache", LIGHTNING_ACCEL_EMULATE="hpu", CXX="no-such-c++-for-this-test"), code)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "DeviceBuildError: The emulated HPU device is built from C++ on first use, and no C++ compiler was found "
        "(CXX='no-such-c++-for-this-test' is not on PATH)."
    ), result.stdout
    assert 'the first use of "hpu" (an HPU tensor, torch.hpu) raises this error' in result.stderr
