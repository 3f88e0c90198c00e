"""The shared seed of the nox sessions (tools/shared_seed.py): what a session's environment gets from it."""

from __future__ import annotations

import sys
from pathlib import Path

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
