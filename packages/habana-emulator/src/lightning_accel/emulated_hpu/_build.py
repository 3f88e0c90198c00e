"""Building the C++ device on first use, and loading it from the cache after that.

The extension is compiled by ninja against the installed torch, with the flags ``torch.utils.cpp_extension`` gives a
CPU extension (its public ``include_paths`` and ``library_paths``), the first time a process needs it, then cached
under a key of the torch version, the Python ABI and a hash of the sources, so every later process (every nox
session, every pytest worker, every DDP rank) loads the same build in milliseconds.

A build never blocks a later start, however it ends (Ctrl-C, ``timeout``, a killed CI job):

- one process builds at a time, holding an advisory lock (``flock``) on ``<build folder>.lock``. The kernel releases
  it when its holder dies, however it dies; the file records the holder's pid and host while it builds, so a waiting
  process says whom it waits for, and the next builder says that the previous build was interrupted. A waiter gives
  up after ``LIGHTNING_ACCEL_BUILD_WAIT`` seconds (default 1200) with an error naming the lock file;
- the build runs in a fresh folder beside the cache entry, renamed into place when whole: an interrupted build leaves
  only that folder, which the next build removes;
- ninja runs with ``PR_SET_PDEATHSIG`` on Linux: when the process that started it dies, ninja gets SIGTERM and stops
  its compilers, so none keeps compiling as an orphan.

ninja's progress is reported one line per unit (``[3/12] compiled runtime/Allocator.cpp``) on stderr, with
``MAX_JOBS`` (or one per available core) parallel jobs.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

import torch

__all__ = [
    "SUPPORTED_TORCH",
    "DeviceBuildError",
    "cache_dir",
    "check_torch",
    "load",
]

#: The torch releases (major, minor) whose C++ device API the sources are written and tested against. The extension
#: uses c10's allocator, guard, hooks and dispatcher interfaces, which change between releases.
SUPPORTED_TORCH: tuple[tuple[int, int], ...] = ((2, 13),)

SOURCES = Path(__file__).parent / "csrc"
_CFLAGS = ["-O2"]
_CACHE_VAR = "LIGHTNING_ACCEL_CACHE_DIR"
_TORCH_EXTENSIONS_VAR = "TORCH_EXTENSIONS_DIR"
_WAIT_VAR = "LIGHTNING_ACCEL_BUILD_WAIT"
_DEFAULT_WAIT_SECONDS = 1200.0
_WAIT_REPORT_SECONDS = 30.0
# ninja's progress lines carry this prefix (NINJA_STATUS), so they cannot be mistaken for a compiler's output.
_STATUS_PREFIX = "lightning-accel-ninja "
_STATUS_LINE = re.compile(re.escape(_STATUS_PREFIX) + r"\[(\d+)/(\d+)\] (.*)")
_OUTPUT_LINES_SHOWN = 40
# The words of ninja's step descriptions in the build file, and how the progress lines say them.
_VERBS = {"compile": ("compiled", "compiling"), "link": ("linked", "linking")}
_lock = threading.Lock()
_module: ModuleType | None = None


class DeviceBuildError(RuntimeError):
    """The emulated HPU device cannot be built or loaded here; the message says what to install or change.

    Raised by :func:`load` (and so by the emulated SDK's load) for an unsupported torch, a missing compiler or ninja,
    a compiler that fails (naming the command and the first error line of its output), a build another process still
    holds after the wait, or a bad build setting (``MAX_JOBS``, ``LIGHTNING_ACCEL_BUILD_WAIT``).

    Example:
        >>> from lightning_accel import emulated_hpu
        >>> try:  # doctest: +SKIP
        ...     emulated_hpu.load()
        ... except emulated_hpu.DeviceBuildError as error:
        ...     print(error)
    """


def check_torch(version: str = torch.__version__) -> None:
    """Refuse a torch release the C++ device was not written for.

    Raises:
        DeviceBuildError: When ``version`` is not one of :data:`SUPPORTED_TORCH`.
    """
    match = re.match(r"(\d+)\.(\d+)", version)
    found = (int(match.group(1)), int(match.group(2))) if match else None
    if found not in SUPPORTED_TORCH:
        supported = ", ".join(f"{major}.{minor}" for major, minor in SUPPORTED_TORCH)
        raise DeviceBuildError(
            f"The emulated HPU device supports torch {supported}, but torch=={version} is installed. Install a "
            f"supported torch (pip install 'torch=={SUPPORTED_TORCH[-1][0]}.{SUPPORTED_TORCH[-1][1]}.*') or a "
            "lightning-accel-habana-emulator release built for your torch."
        )


def _source_files() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.suffix in (".cpp", ".h"))


def _build_key() -> str:
    digest = hashlib.sha256()
    for path in _source_files():
        digest.update(path.relative_to(SOURCES).as_posix().encode())
        digest.update(path.read_bytes())
    digest.update(" ".join(_CFLAGS).encode())
    return digest.hexdigest()[:16]


def _cache_root() -> tuple[Path, str]:
    """The folder the cache lives in, and the setting that chose it (named in the build's messages)."""
    own = os.environ.get(_CACHE_VAR, "").strip()
    if own:
        return Path(own).expanduser().absolute(), _CACHE_VAR
    # torch's variable for where its JIT-built extensions go: this is one, built with torch's flags.
    extensions = os.environ.get(_TORCH_EXTENSIONS_VAR, "").strip()
    if extensions:
        return Path(extensions).expanduser().absolute(), _TORCH_EXTENSIONS_VAR
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser().absolute() / "lightning-accel", f"the default; {_CACHE_VAR} moves it"


def cache_dir() -> Path:
    """Where this torch's build of the current sources lives.

    The root is ``LIGHTNING_ACCEL_CACHE_DIR`` if set, else ``TORCH_EXTENSIONS_DIR`` (torch's folder for JIT-built
    extensions) if set, else ``$XDG_CACHE_HOME/lightning-accel`` (``~/.cache/lightning-accel``); under it,
    ``habana-emulator/torch-<version>-<python tag>-<source hash>``.
    """
    root, _ = _cache_root()
    tag = f"torch-{torch.__version__.replace('+', '_')}-{sys.implementation.cache_tag}-{_build_key()}"
    return root / "habana-emulator" / tag


def _module_name() -> str:
    return f"lightning_accel_hpu_device_{_build_key()}"


def _say(message: str) -> None:
    print(f"lightning-accel: {message}", file=sys.stderr, flush=True)


def _compiler() -> str:
    return os.environ.get("CXX", "").strip() or "c++"


def _ninja() -> str:
    """The ninja of this environment (the ``ninja`` wheel, a dependency), else the one on ``PATH``."""
    try:
        ninja = importlib.import_module("ninja")
        candidate = Path(ninja.BIN_DIR) / ("ninja.exe" if os.name == "nt" else "ninja")
        if candidate.is_file():
            return str(candidate)
    except (ImportError, AttributeError):
        pass
    found = shutil.which("ninja")
    if found is None:
        raise DeviceBuildError(
            "The emulated HPU device is built with ninja on first use, and ninja was not found (neither the ninja "
            "package of this Python nor one on PATH): pip install ninja."
        )
    return found


def _check_toolchain() -> None:
    compiler = _compiler()
    words = shlex.split(compiler)
    if not words or shutil.which(words[0]) is None:
        raise DeviceBuildError(
            f"The emulated HPU device is built from C++ on first use, and no C++ compiler was found (CXX={compiler!r} "
            "is not on PATH). Install one (Debian/Ubuntu: apt-get install g++; Fedora: dnf install gcc-c++; macOS: "
            "xcode-select --install) or point CXX at it."
        )
    if os.name == "nt":
        raise DeviceBuildError(
            "The emulated HPU device is built with a POSIX C++ toolchain (g++ or clang++) and runs on Linux and "
            "macOS, as the Gaudi SDK runs on Linux only. Use Linux (WSL works) or macOS."
        )


def _jobs() -> tuple[int, str]:
    """How many compile jobs ninja runs at once, and why (``MAX_JOBS``, as torch's own extension builds read it)."""
    value = os.environ.get("MAX_JOBS", "").strip()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not value:
        return cores, "one per available core; MAX_JOBS sets it"
    if not value.isdigit() or int(value) < 1:
        raise DeviceBuildError(
            f"MAX_JOBS={value!r} is not a number of parallel compile jobs. Set it to a whole number of at least 1 "
            f"(MAX_JOBS=2), or unset it for one job per available core ({cores} here)."
        )
    return int(value), f"MAX_JOBS={value}"


def _wait_seconds() -> float:
    value = os.environ.get(_WAIT_VAR, "").strip()
    if not value:
        return _DEFAULT_WAIT_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise DeviceBuildError(
            f"{_WAIT_VAR}={value!r} is not a number of seconds. Set it to how long a process waits for another "
            f"process's build of the emulated HPU device (a number >= 0, e.g. {_WAIT_VAR}=600), or unset it for "
            f"{_DEFAULT_WAIT_SECONDS:.0f}."
        )
    return seconds


def _is_whole(directory: Path, name: str) -> bool:
    # The folder is renamed into place with its marker inside, so the marker means the whole build is there.
    return (directory / "complete").is_file() and (directory / f"{name}.so").is_file()


def _ninja_path(path: str) -> str:
    return path.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _ninja_file(name: str, sources: list[Path]) -> str:
    """The build file: torch.utils.cpp_extension's compile and link flags for a CPU extension, one unit per source."""
    from torch.utils.cpp_extension import include_paths, library_paths

    includes = [*include_paths("cpu"), sysconfig.get_path("include", scheme="posix_prefix")]
    cflags = [
        f"-DTORCH_EXTENSION_NAME={name}",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        *(f"-isystem {shlex.quote(path)}" for path in includes),
        "-fPIC",
        "-std=c++20",
        *_CFLAGS,
    ]
    ldflags = ["-shared", *(f"-L{shlex.quote(path)}" for path in library_paths("cpu"))]
    ldflags += ["-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"]
    if sys.platform == "darwin":
        ldflags.append("-undefined dynamic_lookup")  # the darwin linker's consent to symbols the process provides
    lines = [
        "ninja_required_version = 1.3",
        f"cxx = {_compiler()}",
        f"cflags = {' '.join(cflags)}",
        f"ldflags = {' '.join(ldflags)}",
        "",
        "rule compile",
        "  command = $cxx $cflags -c $in -o $out",
        "  description = compile $unit",
        "",
        "rule link",
        "  command = $cxx $in $ldflags -o $out",
        "  description = link $out",
        "",
    ]
    objects = []
    for source in sources:
        unit = source.relative_to(SOURCES).as_posix()
        objects.append(_ninja_path(str(Path(unit).with_suffix(".o"))))
        lines += [f"build {objects[-1]}: compile {_ninja_path(str(source))}", f"  unit = {unit}"]
    lines += [f"build {name}.so: link {' '.join(objects)}", f"default {name}.so", ""]
    return "\n".join(lines)


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux), or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork: the child only calls it
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above armed it
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is not None:
        return
    # SIGTERM, not SIGKILL: ninja then signals its compilers' process groups and waits for them.
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _failure(output: list[str], ninja_command: list[str]) -> tuple[str, str, list[str]]:
    """The failed command, the first error line of its output, and that output, from ninja's output."""
    for index, line in enumerate(output):
        if not line.startswith("FAILED:"):
            continue
        command = output[index + 1].strip() if index + 1 < len(output) else "(ninja did not print it)"
        produced = []
        for rest in output[index + 2 :]:
            if rest.startswith(("FAILED:", "ninja: ")) or _STATUS_LINE.match(rest):
                break
            produced.append(rest)
        errors = [text for text in produced if re.search(r"\berror\b", text, re.IGNORECASE)]
        first = errors[0] if errors else next((text for text in produced if text.strip()), "")
        return command, first.strip(), produced
    ninja_errors = [line for line in output if line.startswith("ninja: error")]
    first = ninja_errors[0] if ninja_errors else next((line for line in output if line.strip()), "")
    return " ".join(shlex.quote(word) for word in ninja_command), first.strip(), output


def _compile(staging: Path, name: str, destination: Path, origin: str) -> float:
    sources = [path for path in _source_files() if path.suffix == ".cpp"]
    jobs, jobs_origin = _jobs()
    ninja = _ninja()
    (staging / "build.ninja").write_text(_ninja_file(name, sources))
    command = [ninja, "-j", str(jobs)]
    _say(
        f"building the emulated HPU device for torch {torch.__version__} (once; cached in {destination}, {origin}): "
        f"{len(sources)} C++ units and a link, {jobs} parallel jobs ({jobs_origin})..."
    )
    start = time.perf_counter()
    output: list[str] = []
    process = subprocess.Popen(
        command,
        cwd=staging,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "NINJA_STATUS": _STATUS_PREFIX + "[%f/%t] "},
        text=True,
        errors="replace",
        preexec_fn=_die_with_parent(),  # takes no lock in the child: prctl, getppid, kill
    )
    # ninja prints a step's status line when the step ends, and "FAILED: ..." right after it when it failed.
    pending: re.Match[str] | None = None

    def report(status: re.Match[str], failed: bool) -> None:
        done, total, step = status.groups()
        verb, unit = step.split(" ", 1)
        past, going = _VERBS.get(verb, (verb, verb))
        said = f"{going} {unit} failed" if failed else f"{past} {unit}"
        _say(f"[{done}/{total}] {said} ({time.perf_counter() - start:.0f} s)")

    try:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.rstrip("\n")
            if pending is not None:
                report(pending, failed=line.startswith("FAILED:"))
            pending = _STATUS_LINE.match(line)
            output.append(line)
        if pending is not None:
            report(pending, failed=False)
        code = process.wait()
    except BaseException:  # Ctrl-C or any error here: no compiler outlives the build
        _stop(process)
        raise
    if code != 0:
        failed, first, produced = _failure(output, command)
        said = f"failed with: {first}" if first else "failed and printed nothing"
        shown = produced[-_OUTPUT_LINES_SHOWN:]
        details = "".join(f"{line}\n" for line in ["Its output:", *shown]) if shown else ""
        raise DeviceBuildError(
            f"Building the emulated HPU device failed: the command\n  {failed}\n{said}\n{details}The compiler is "
            f"CXX={_compiler()!r} (unset CXX for c++). Fix the cause and start again; nothing was cached. If it "
            "fails again, report this message with the output of `lightning-accel env`."
        )
    return time.perf_counter() - start


def _lock_path(directory: Path) -> Path:
    return directory.with_name(directory.name + ".lock")


def _describe(record: str) -> str:
    fields = dict(part.split("=", 1) for part in record.split() if "=" in part)
    return f"pid {fields.get('pid', '?')} on host {fields.get('host', '?')}, started {fields.get('started', '?')}"


def _pid_gone(record: str) -> bool:
    """Whether the holder the record names is a process of this host that no longer runs."""
    fields = dict(part.split("=", 1) for part in record.split() if "=" in part)
    if fields.get("host") != socket.gethostname() or not fields.get("pid", "").isdigit():
        return False
    try:
        os.kill(int(fields["pid"]), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _read(fd: int) -> str:
    return os.pread(fd, 4096, 0).decode(errors="replace").strip()


@contextmanager
def _build_lock(path: Path, wait: float) -> Iterator[str]:
    """Hold the build lock ``path``; yields the record an interrupted holder left in it ("" after a whole build)."""
    import fcntl

    deadline = time.monotonic() + wait
    next_report = time.monotonic()
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise DeviceBuildError(
                f"The emulated HPU device cannot be built in {path.parent}: its build lock {path} cannot be created "
                f"({error}). Set {_CACHE_VAR} to a folder this user can write to."
            ) from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        except OSError as error:
            os.close(fd)
            raise DeviceBuildError(
                f"The build lock {path} cannot be taken ({error}): its filesystem does not support file locks. Set "
                f"{_CACHE_VAR} to a folder on a local filesystem."
            ) from error
        else:
            # A user may have deleted the file while this process opened it: the lock must be on the file there now.
            try:
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
            continue
        holder = _read(fd)
        os.close(fd)
        who = _describe(holder) if holder else "a process that has not written its name yet"
        now = time.monotonic()
        if now >= deadline:
            gone = (
                " That pid no longer runs, so a process it started (forked) still holds the lock."
                if _pid_gone(holder)
                else ""
            )
            raise DeviceBuildError(
                f"Another process is building the emulated HPU device ({who}) and still holds the build lock {path} "
                f"after {wait:.0f} s of waiting ({_WAIT_VAR}).{gone} If no build is running (see `ps -p <pid>` on "
                f"that host), delete {path} and start again; to wait longer, raise {_WAIT_VAR} (seconds)."
            )
        if now >= next_report:
            _say(
                f"waiting for the build of the emulated HPU device by {who} (lock {path}; at most "
                f"{deadline - now:.0f} s more, {_WAIT_VAR})..."
            )
            next_report = now + _WAIT_REPORT_SECONDS
        time.sleep(min(0.5, max(deadline - now, 0.0)))
    try:
        previous = _read(fd)
        started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()} started={started}\n".encode(), 0)
        try:
            yield previous
        finally:
            os.ftruncate(fd, 0)  # an empty lock file: the last build ended as it should (built or failed)
    finally:
        os.close(fd)  # closing releases the lock


def _remove_leftovers(directory: Path) -> None:
    """Folders interrupted builds and replaced entries left beside ``directory`` (only its lock's holder calls it)."""
    for leftover in directory.parent.glob(f"{directory.name}.*"):
        if leftover.is_dir() and leftover.name[len(directory.name) + 1 :].startswith(("building-", "replaced-")):
            shutil.rmtree(leftover, ignore_errors=True)


def _publish(staging: Path, directory: Path) -> None:
    if directory.exists():
        # An incomplete entry (an older release built in place, and may have been interrupted): moved away first, as
        # rename() cannot replace a non-empty folder.
        replaced = Path(tempfile.mkdtemp(prefix=f"{directory.name}.replaced-", dir=directory.parent))
        os.rename(directory, replaced / "entry")
        shutil.rmtree(replaced, ignore_errors=True)
    os.rename(staging, directory)


def _build(directory: Path, name: str) -> None:
    _check_toolchain()
    _, origin = _cache_root()
    wait = _wait_seconds()
    _jobs()  # a bad MAX_JOBS is refused before waiting for anyone
    with _build_lock(_lock_path(directory), wait) as previous:
        if _is_whole(directory, name):
            return  # another process built it while this one waited
        if previous:
            _say(f"the previous build ({_describe(previous)}) was interrupted; building again.")
        _remove_leftovers(directory)
        staging = Path(tempfile.mkdtemp(prefix=f"{directory.name}.building-", dir=directory.parent))
        try:
            elapsed = _compile(staging, name, directory, origin)
            (staging / "build_seconds").write_text(f"{elapsed:.1f}\n")
            (staging / "complete").write_text(name + "\n")
            _publish(staging, directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone already when published
        _say(f"built the emulated HPU device in {elapsed:.0f} s.")


def _import(path: Path, name: str) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    try:
        loader.exec_module(module)
    except (ImportError, OSError) as error:
        raise DeviceBuildError(
            f"The build of the emulated HPU device in {path.parent} cannot be loaded ({error}). Delete that folder "
            "to build it again."
        ) from error
    return module


def load() -> ModuleType:
    """Build (first time only) and load the device; afterwards ``"hpu"`` is a torch device backed by host memory.

    Loading registers the allocator, device guard, hooks, generator and kernels with torch for c10's built-in
    ``DeviceType::HPU``; it cannot be undone in a process. The returned module has ``memory_stats``,
    ``reset_peak_memory_stats``, ``set_memory_limit`` and ``default_generator``.

    Raises:
        DeviceBuildError: For an unsupported torch, a missing compiler or ninja, a failed compile (naming the command
            and its first error line), another process's build still running after ``LIGHTNING_ACCEL_BUILD_WAIT``
            seconds, or a bad ``MAX_JOBS`` or ``LIGHTNING_ACCEL_BUILD_WAIT``.
    """
    global _module
    with _lock:
        if _module is not None:
            return _module
        check_torch()
        directory, name = cache_dir(), _module_name()
        if not _is_whole(directory, name):
            _build(directory, name)
        _module = _import(directory / f"{name}.so", name)
        return _module
