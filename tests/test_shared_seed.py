"""The shared seed of the nox sessions (tools/shared_seed.py): what a session's environment gets from it."""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import shared_seed  # noqa: E402


def _distribution(site: Path, name: str, version: str, files: dict[str, str]) -> None:
    dist_info = site / f"{name}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
    rows = [f"{name}-{version}.dist-info/METADATA,,", f"{name}-{version}.dist-info/RECORD,,"]
    for relative, text in files.items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        rows.append(f"{relative},,")
    (dist_info / "RECORD").write_text("\n".join(rows) + "\n")


def _environment(root: Path) -> tuple[Path, Path]:
    site, bin_dir = root / "lib" / "site-packages", root / "bin"
    site.mkdir(parents=True)
    bin_dir.mkdir()
    return site, bin_dir


def test_a_session_gets_the_seeds_files_as_hard_links_and_keeps_its_own_distributions(tmp_path: Path) -> None:
    seed_site, seed_bin = _environment(tmp_path / "seed")
    site, bin_dir = _environment(tmp_path / "session")
    _distribution(seed_site, "torchlike", "2.13.0", {"torchlike/__init__.py": "VERSION = '2.13.0'\n"})
    _distribution(seed_site, "pip", "99.0", {"pip/__init__.py": "VERSION = 'seed'\n"})
    _distribution(site, "pip", "24.0", {"pip/__init__.py": "VERSION = 'session'\n"})

    linked = shared_seed.link_seed(seed_site, seed_bin, site, bin_dir)

    assert linked == 3  # torchlike's module, METADATA and RECORD
    module = site / "torchlike" / "__init__.py"
    assert module.stat().st_ino == (seed_site / "torchlike" / "__init__.py").stat().st_ino
    assert (site / "pip" / "__init__.py").read_text() == "VERSION = 'session'\n"
    assert sorted(path.name for path in site.glob("pip-*.dist-info")) == ["pip-24.0.dist-info"]


def test_console_scripts_name_the_sessions_interpreter(tmp_path: Path) -> None:
    seed_site, seed_bin = _environment(tmp_path / "seed")
    site, bin_dir = _environment(tmp_path / "session")
    (seed_bin / "pytest").write_text(f"#!{seed_bin / 'python'}\nimport pytest\n")
    (seed_bin / "activate").write_text("# no interpreter named here\n")

    shared_seed.link_seed(seed_site, seed_bin, site, bin_dir)

    assert (bin_dir / "pytest").read_text() == f"#!{bin_dir / 'python'}\nimport pytest\n"
    assert (bin_dir / "pytest").stat().st_mode & 0o111
    assert not (bin_dir / "activate").exists()


def test_the_seed_is_named_by_interpreter_and_requirements() -> None:
    one = shared_seed.seed_name("3.11", ["torch==2.13.0", "lightning==2.6.6"])
    assert one == shared_seed.seed_name("3.11", ["torch==2.13.0", "lightning==2.6.6"])
    assert one != shared_seed.seed_name("3.11", ["torch==2.13.0", "lightning==2.3.3"])
    assert one != shared_seed.seed_name("3.10", ["torch==2.13.0", "lightning==2.6.6"])


def _seed(root: Path, name: str, age: float | None) -> Path:
    """A seed made ``age`` seconds ago (None: its making was interrupted)."""
    seed = root / name
    (seed / "lib").mkdir(parents=True)
    if age is not None:
        shared_seed.mark_complete(seed)
        made = time.time() - age
        os.utime(seed / "complete", (made, made))
    return seed


def test_a_seed_is_used_for_a_week_and_an_interrupted_one_never(tmp_path: Path) -> None:
    assert shared_seed.is_fresh(_seed(tmp_path, "fresh", age=3600))
    assert not shared_seed.is_fresh(_seed(tmp_path, "old", age=shared_seed.MAX_AGE + 1))
    assert not shared_seed.is_fresh(_seed(tmp_path, "interrupted", age=None))


def test_prune_removes_stale_and_interrupted_seeds_but_not_one_in_use(tmp_path: Path) -> None:
    fresh = _seed(tmp_path, "fresh", age=3600)
    old = _seed(tmp_path, "old", age=shared_seed.MAX_AGE + 1)
    interrupted = _seed(tmp_path, "interrupted", age=None)
    held = _seed(tmp_path, "held", age=shared_seed.MAX_AGE + 1)
    kept = _seed(tmp_path, "kept", age=None)  # the one this session is using

    with shared_seed.seed_lock(held):  # another run is linking from it
        removed = shared_seed.prune(tmp_path, keep=kept)

    assert sorted(path.name for path in removed) == ["interrupted", "old"]
    assert not old.exists() and not interrupted.exists()
    assert fresh.exists() and held.exists() and kept.exists()


def test_a_second_run_waits_for_the_seed_a_first_run_holds(tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    with shared_seed.seed_lock(seed) as first:
        with shared_seed.seed_lock(seed, wait=False) as second:
            assert (first, second) == (True, False)
    with shared_seed.seed_lock(seed, wait=False) as again:
        assert again


def test_a_cache_on_another_file_system_is_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_site, seed_bin = _environment(tmp_path / "seed")
    site, bin_dir = _environment(tmp_path / "session")
    _distribution(seed_site, "torchlike", "2.13.0", {"torchlike/__init__.py": "VERSION = '2.13.0'\n"})

    def cross_device(source: object, target: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(shared_seed.os, "link", cross_device)
    assert shared_seed.link_seed(seed_site, seed_bin, site, bin_dir) == 3
    module = site / "torchlike" / "__init__.py"
    assert module.read_text() == "VERSION = '2.13.0'\n"
    assert module.stat().st_ino != (seed_site / "torchlike" / "__init__.py").stat().st_ino
