"""Building the C++ device on first use, and loading it from the cache after that.

The extension is compiled by ``torch.utils.cpp_extension`` against the installed torch the first time a process needs
it, then cached in the user's cache folder under a key of the torch version, the Python ABI and a hash of the sources,
so every later process (every nox session, every pytest worker, every DDP rank) loads the same build in milliseconds.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shutil
import sys
import threading
import time
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
_lock = threading.Lock()
_module: ModuleType | None = None


class DeviceBuildError(RuntimeError):
    """The emulated HPU device cannot be built or loaded here; the message says what to install or change."""


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


def cache_dir() -> Path:
    """Where this torch's build of the current sources lives.

    ``LIGHTNING_ACCEL_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/lightning-accel`` (``~/.cache/lightning-accel``),
    then ``habana-emulator/torch-<version>-<python tag>-<source hash>``.
    """
    root = os.environ.get("LIGHTNING_ACCEL_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = os.path.join(xdg, "lightning-accel")
    tag = f"torch-{torch.__version__.replace('+', '_')}-{sys.implementation.cache_tag}-{_build_key()}"
    return Path(root) / "habana-emulator" / tag


def _module_name() -> str:
    return f"lightning_accel_hpu_device_{_build_key()}"


def _check_toolchain() -> None:
    from torch.utils.cpp_extension import is_ninja_available

    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        raise DeviceBuildError(
            f"The emulated HPU device is built from C++ on first use, and no C++ compiler was found (CXX={compiler!r} "
            "is not on PATH). Install one (Debian/Ubuntu: apt-get install g++; Fedora: dnf install gcc-c++; macOS: "
            "xcode-select --install) or point CXX at it."
        )
    if not is_ninja_available():
        raise DeviceBuildError(
            "The emulated HPU device is built with ninja on first use, and ninja was not found: pip install ninja."
        )


def _import(path: Path, name: str) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _build(directory: Path, name: str) -> Path:
    from torch.utils.cpp_extension import load as build_extension

    _check_toolchain()
    directory.mkdir(parents=True, exist_ok=True)
    print(
        f"lightning-accel: building the emulated HPU device for torch {torch.__version__} (once; cached in "
        f"{directory})...",
        file=sys.stderr,
        flush=True,
    )
    start = time.perf_counter()
    try:
        build_extension(
            name=name,
            sources=[str(p) for p in _source_files() if p.suffix == ".cpp"],
            extra_cflags=_CFLAGS,
            build_directory=str(directory),
            is_python_module=False,  # imported below, from the cache, as every later process does
            verbose=False,
        )
    except (RuntimeError, OSError) as error:
        raise DeviceBuildError(
            f"Building the emulated HPU device failed in {directory}: {error}\nRemove that folder to retry from "
            "scratch; if it fails again, report the output above with `lightning-accel env`."
        ) from error
    elapsed = time.perf_counter() - start
    (directory / "build_seconds").write_text(f"{elapsed:.1f}\n")
    # Written last: another process loads the build only once this marker says it is whole.
    (directory / "complete").write_text(name + "\n")
    print(f"lightning-accel: built the emulated HPU device in {elapsed:.0f} s.", file=sys.stderr, flush=True)
    return directory / f"{name}.so"


def load() -> ModuleType:
    """Build (first time only) and load the device; afterwards ``"hpu"`` is a torch device backed by host memory.

    Loading registers the allocator, device guard, hooks, generator and kernels with torch for c10's built-in
    ``DeviceType::HPU``; it cannot be undone in a process. The returned module has ``memory_stats``,
    ``reset_peak_memory_stats``, ``set_memory_limit`` and ``default_generator``.

    Raises:
        DeviceBuildError: For an unsupported torch, a missing compiler or ninja, or a failed build.
    """
    global _module
    with _lock:
        if _module is not None:
            return _module
        check_torch()
        directory, name = cache_dir(), _module_name()
        library = directory / f"{name}.so"
        if not (directory / "complete").is_file() or not library.is_file():
            library = _build(directory, name)
        _module = _import(library, name)
        return _module
