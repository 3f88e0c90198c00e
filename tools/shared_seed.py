"""Install the heavy requirements that most nox sessions share once, and hard-link them into each session.

Ten sessions need the same torch, Lightning and test tools. Unpacking torch alone takes about 45 s on two cores, so
installing them in every session cost a quarter of a CI run. The first session installs them into a *seed*
environment under ``.nox/_seeds`` (one per interpreter and requirement list); every session then hard-links the
seed's site-packages into its own virtual environment and rewrites the seed's console scripts for its own interpreter.
The session's environment is then an ordinary one: pip sees the seeded distributions as installed, installs the
session's own packages on top, and may replace a seeded one (pip unlinks files, so the seed keeps its copy).

A distribution the session already has (its own pip, say) is never overwritten by the seed's copy.

Importable without nox, so that it is tested (``tests/test_shared_seed.py``).

Example:
    >>> seed_name("3.11", ["torch==2.13.0", "pytest>=8"])[:5]
    '3.11-'
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

__all__ = ["link_seed", "seed_name"]


def seed_name(python: str, requirements: Iterable[str]) -> str:
    """The seed's folder name: the interpreter's version and a digest of the requirement list, in order."""
    digest = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    return f"{python}-{digest}"


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
            os.link(path, destination / name)
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
