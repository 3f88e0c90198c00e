"""Check the built wheels: one per distribution; the core and habana-emulator wheels carry start-up hooks at the root.

Ray is only in the habana wheel's ``ray`` extra. The Gaudi SDK emulator is its own wheel, with every file of its
package (its device's C++ sources too), the emulated SDK's entry points, and nothing of it in the habana wheel, which
pulls it only through its ``emulator`` extra.
"""

from __future__ import annotations

import configparser
import email.message
import email.parser
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

EXPECTED = (
    "lightning_accel-",
    "lightning_accel_core-",
    "lightning_accel_habana-",
    "lightning_accel_habana_emulator-",
    "lightning_accel_graphcore-",
    "lightning_accel_deepspeed_hpu-",
)


def _ray_extra_problems(habana: Path) -> list[str]:
    """Ray is the habana wheel's optional ``ray`` extra, never a requirement of the plain install."""
    with zipfile.ZipFile(habana) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(wheel.read(name).decode())
    problems = []
    if "ray" not in (metadata.get_all("Provides-Extra") or []):
        problems.append(f"{habana.name} has no 'ray' extra (lightning-accel-habana[ray])")
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        plain_install = requirement.marker is None or requirement.marker.evaluate({"extra": ""})
        if requirement.name == "ray" and plain_install:
            problems.append(f"{habana.name} requires {line!r} in its plain install; Ray belongs in the 'ray' extra")
    return problems


EMULATOR_PACKAGE = Path(__file__).resolve().parents[1] / "packages" / "habana-emulator" / "src"
EMULATOR_AUTOLOAD = "_lightning_accel_habana_emulator_autoload.py"


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def _entry_points(wheel: Path) -> dict[str, dict[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        parser = configparser.ConfigParser(delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        if names:
            parser.read_string(archive.read(names[0]).decode())
    return {section: dict(parser[section]) for section in parser.sections()}


def _source_files(folder: Path) -> list[Path]:
    """The files of ``folder`` in the source tree that a build ships: those git does not ignore (none without git)."""
    if not folder.is_dir():
        return []
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "."],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return []
    return [folder / name for name in listed if (folder / name).is_file()]


def _emulator_problems(habana: Path | None, emulator: Path | None) -> list[str]:
    """The emulator ships whole, declares the emulated SDK; the habana wheel has none of it, only the extra."""
    problems = []
    if emulator is not None:
        names = set(zipfile.ZipFile(emulator).namelist())
        if EMULATOR_AUTOLOAD not in names:
            problems.append(f"{emulator.name} lacks {EMULATOR_AUTOLOAD} (its torch.backends entry point)")
        for path in _source_files(EMULATOR_PACKAGE / "lightning_accel"):  # every file, not only the Python ones
            relative = path.relative_to(EMULATOR_PACKAGE).as_posix()
            if relative not in names:
                problems.append(f"{emulator.name} lacks {relative}")
        entry_points = _entry_points(emulator)
        declared = entry_points.get("lightning_accel.emulated_sdks.hpu", {})
        if declared.get("habana_frameworks.torch") != "lightning_accel.habana_emulator":
            problems.append(
                f"{emulator.name} does not declare habana_frameworks.torch in lightning_accel.emulated_sdks.hpu"
            )
        if "torch.backends" not in entry_points:
            problems.append(f"{emulator.name} declares no torch.backends entry point (the SDK's load at import torch)")
    if habana is not None:
        names = zipfile.ZipFile(habana).namelist()
        if any("habana_emulator" in name or "_emulator/" in name for name in names):
            problems.append(f"{habana.name} ships emulator files; they belong to lightning-accel-habana-emulator")
        entry_points = _entry_points(habana)
        for group in ("lightning_accel.emulated_sdks.hpu", "torch.backends"):
            if group in entry_points:
                problems.append(f"{habana.name} declares {group}; the emulator's distribution does")
        requirements = [Requirement(line) for line in _metadata(habana).get_all("Requires-Dist") or []]
        emulator_extra = [r for r in requirements if r.name == "lightning-accel-habana-emulator"]
        if not emulator_extra or any(r.marker is None or r.marker.evaluate({"extra": ""}) for r in emulator_extra):
            problems.append(
                f"{habana.name} must pull lightning-accel-habana-emulator only through its 'emulator' extra"
            )
    return problems


def main(out: Path) -> int:
    wheels = sorted(out.glob("*.whl"))
    problems = [
        f"no wheel starting with {prefix!r}"
        for prefix in EXPECTED
        if not any(w.name.startswith(prefix) for w in wheels)
    ]
    core = next((w for w in wheels if w.name.startswith("lightning_accel_core-")), None)
    if core is not None:
        names = set(zipfile.ZipFile(core).namelist())
        for required in (
            "lightning_accel_autoload.pth",
            "lightning_accel_autoload.start",
            "_lightning_accel_autoload.py",
            "_lightning_accel_sdk_aliases.py",
        ):
            if required not in names:
                problems.append(f"{core.name} lacks {required} at its root")
        if any(name == "lightning_accel/__init__.py" for name in names):
            problems.append(f"{core.name} ships lightning_accel/__init__.py; the namespace must stay implicit")
    habana = next((w for w in wheels if w.name.startswith("lightning_accel_habana-")), None)
    emulator = next((w for w in wheels if w.name.startswith("lightning_accel_habana_emulator-")), None)
    problems.extend(_emulator_problems(habana, emulator))
    if habana is not None:
        problems.extend(_ray_extra_problems(habana))
    for wheel in wheels:
        if "lightning_accel/__init__.py" in zipfile.ZipFile(wheel).namelist():
            problems.append(f"{wheel.name} ships lightning_accel/__init__.py")
    for problem in problems:
        print(f"check_wheels: {problem}", file=sys.stderr)
    print(f"check_wheels: {len(wheels)} wheels checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
