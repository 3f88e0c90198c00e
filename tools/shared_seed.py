"""Install the heavy requirements that most nox sessions share once, and hard-link them into each session.

Ten sessions need the same torch, Lightning and test tools. Unpacking torch alone takes about 45 s on two cores, so
installing them in every session cost a quarter of a CI run; the IPU stack's torch 2.0.1, with its CUDA libraries
(2.5 GB), took 80 s of every run. A session installs them into a *seed* environment in the user's cache (one per
interpreter and requirement list, made again after :data:`MAX_AGE` so that ranges such as ``pytest>=8`` pick up new
releases); every session then hard-links the seed's site-packages into its own virtual environment (copies them
where the cache is on another file system) and rewrites the seed's console scripts for its own interpreter.
The session's environment is then an ordinary one: pip sees the seeded distributions as installed, installs the
session's own packages on top, and may replace a seeded one (pip unlinks files, so the seed keeps its copy).

A distribution the session already has (its own pip, say) is never overwritten by the seed's copy.

Importable without nox, so that it is tested (``tests/test_shared_seed.py``).

Example:
    >>> seed_name("3.11", ["torch==2.13.0", "pytest>=8"])[:5]
    '3.11-'
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["MAX_AGE", "is_fresh", "link_seed", "mark_complete", "prune", "seed_lock", "seed_name"]

MAX_AGE = 7 * 24 * 3600
"""Seconds a seed is used after it was made: then it is made again, with the releases of that day."""
_COMPLETE = "complete"


def seed_name(python: str, requirements: Iterable[str]) -> str:
    """The seed's folder name: the interpreter's version and a digest of the requirement list, in order."""
    digest = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    return f"{python}-{digest}"


@contextlib.contextmanager
def seed_lock(seed: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the seed's lock (``<seed>.lock``) while it is made, linked from or removed.

    Two runs on one machine share the user's cache: one makes a seed while the other waits for it. The lock is the
    kernel's (``flock``), so a run that is killed leaves nothing that blocks the next one. Yields whether it is held
    (always, when ``wait``).
    """
    seed.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{seed}.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_fresh(seed: Path, now: float | None = None) -> bool:
    """Whether the seed was made completely (an interrupted one was not) less than :data:`MAX_AGE` ago."""
    marker = seed / _COMPLETE
    if not marker.exists():
        return False
    return (time.time() if now is None else now) - marker.stat().st_mtime < MAX_AGE


def mark_complete(seed: Path) -> None:
    """Record that the seed was made completely, now."""
    (seed / _COMPLETE).touch()


def prune(root: Path, keep: Path, now: float | None = None) -> list[Path]:
    """Remove the seeds under ``root`` (but ``keep``) that are stale or were left incomplete; returns them.

    A seed another run holds (it is being made or linked from) is left alone.
    """
    removed = []
    for seed in sorted(path for path in root.iterdir() if path.is_dir()):
        if seed == keep or is_fresh(seed, now):
            continue
        with seed_lock(seed, wait=False) as held:
            if held and not is_fresh(seed, now):
                shutil.rmtree(seed, ignore_errors=True)  # its lock file stays: another run may be waiting on it
                removed.append(seed)
    return removed


def _project(dist_info: str) -> str:
    name = dist_info.rsplit("-", 1)[0] if dist_info.count("-") else dist_info
    return re.sub(r"[-_.]+", "-", name).lower()


def _distributions(site: Path) -> dict[str, Path]:
    return {_project(path.name[: -len(".dist-info")]): path for path in site.glob("*.dist-info")}


def _files_of(dist_info: Path) -> set[Path]:
    """The site-packages paths a distribution installed, from its RECORD (the dist-info folder itself included)."""
    files = {dist_info}
    record = dist_info / "RECORD"
    if record.exists():
        with record.open(newline="") as handle:
            files.update(dist_info.parent / row[0] for row in csv.reader(handle) if row)
    return files


def _link_tree(source: Path, target: Path, skip: set[Path]) -> int:
    linked = 0
    for folder, dirs, files in os.walk(source):
        here = Path(folder)
        dirs[:] = [name for name in dirs if here / name not in skip]
        destination = target / here.relative_to(source)
        destination.mkdir(parents=True, exist_ok=True)
        for name in files:
            path = here / name
            if path in skip or (destination / name).exists():
                continue
            try:
                os.link(path, destination / name)
            except OSError as error:
                if error.errno != errno.EXDEV:
                    raise
                shutil.copy2(path, destination / name)  # the cache is on another file system
            linked += 1
    return linked


def _rewrite_scripts(seed_bin: Path, seed_python: str, session_bin: Path, session_python: str) -> None:
    """Console scripts name their interpreter: the seed's become the session's."""
    for script in seed_bin.iterdir():
        target = session_bin / script.name
        if target.exists() or not script.is_file() or script.is_symlink():
            continue
        try:
            text = script.read_text()
        except UnicodeDecodeError:
            continue
        if seed_python not in text:
            continue
        target.write_text(text.replace(seed_python, session_python))
        target.chmod(0o755)


def link_seed(seed_site: Path, seed_bin: Path, site: Path, bin_dir: Path) -> int:
    """Hard-link the seed environment's distributions into a session's; returns the number of files linked.

    Args:
        seed_site: the seed's site-packages.
        seed_bin: the seed's scripts folder (``bin``), holding its ``python``.
        site: the session's site-packages.
        bin_dir: the session's scripts folder.
    """
    own = _distributions(site)
    skip: set[Path] = set()
    for project, dist_info in _distributions(seed_site).items():
        if project in own:
            skip |= _files_of(dist_info)
    linked = _link_tree(seed_site, site, skip)
    _rewrite_scripts(seed_bin, str(seed_bin / "python"), bin_dir, str(bin_dir / "python"))
    return linked
