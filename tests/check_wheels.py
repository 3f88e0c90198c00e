"""Check the built wheels: one per distribution; the core and habana-emulator wheels carry start-up hooks at the root.

Ray is only in the habana wheel's ``ray`` extra. Each SDK emulator (Gaudi's, poptorch's) is its own wheel, with every
file of its package (the Gaudi device's C++ sources too) and the emulated SDK's entry points, and nothing of it is in
its integration's wheel, which pulls it only through its ``emulator`` extra.
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
    "lightning_accel_poptorch_emulator-",
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


PACKAGES = Path(__file__).resolve().parents[1] / "packages"
EMULATOR_AUTOLOAD = "_lightning_accel_habana_emulator_autoload.py"


class _Split:
    """An integration and its SDK emulator, a distribution of its own."""

    def __init__(self, integration: str, emulator: str, sdk_module: str, device_type: str) -> None:
        self.integration, self.emulator = integration, emulator
        self.sdk_module, self.group = sdk_module, f"lightning_accel.emulated_sdks.{device_type}"
        self.emulator_module = "lightning_accel." + emulator.replace("-", "_")
        self.source = PACKAGES / emulator / "src"

    @property
    def integration_prefix(self) -> str:
        return f"lightning_accel_{self.integration.replace('-', '_')}-"

    @property
    def emulator_prefix(self) -> str:
        return f"lightning_accel_{self.emulator.replace('-', '_')}-"


SPLITS = (
    _Split("habana", "habana-emulator", "habana_frameworks.torch", "hpu"),
    _Split("graphcore", "poptorch-emulator", "poptorch", "ipu"),
)


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


def _emulator_problems(split: _Split, integration: Path | None, emulator: Path | None) -> list[str]:
    """The emulator ships whole and declares the emulated SDK; the integration has none of it, only the extra."""
    problems = []
    if emulator is not None:
        names = set(zipfile.ZipFile(emulator).namelist())
        for path in _source_files(split.source / "lightning_accel"):  # every file, not only the Python ones
            relative = path.relative_to(split.source).as_posix()
            if relative not in names:
                problems.append(f"{emulator.name} lacks {relative}")
        declared = _entry_points(emulator).get(split.group, {})
        if declared.get(split.sdk_module) != split.emulator_module:
            problems.append(f"{emulator.name} does not declare {split.sdk_module} in {split.group}")
    if integration is not None:
        names = zipfile.ZipFile(integration).namelist()
        stem = split.emulator_module.rsplit(".", 1)[1]
        if any(stem in name or "_emulator/" in name for name in names):
            problems.append(f"{integration.name} ships emulator files; they belong to lightning-accel-{split.emulator}")
        if split.group in _entry_points(integration):
            problems.append(f"{integration.name} declares {split.group}; the emulator's distribution does")
        requirements = [Requirement(line) for line in _metadata(integration).get_all("Requires-Dist") or []]
        extra = [r for r in requirements if r.name == f"lightning-accel-{split.emulator}"]
        if not extra or any(r.marker is None or r.marker.evaluate({"extra": ""}) for r in extra):
            problems.append(
                f"{integration.name} must pull lightning-accel-{split.emulator} only through its 'emulator' extra"
            )
    return problems


def _gaudi_start_up_problems(habana: Path | None, emulator: Path | None) -> list[str]:
    """As the SDK loads at ``import torch`` in eager mode, the Gaudi emulator does, from its own wheel only."""
    problems = []
    if emulator is not None:
        if EMULATOR_AUTOLOAD not in zipfile.ZipFile(emulator).namelist():
            problems.append(f"{emulator.name} lacks {EMULATOR_AUTOLOAD} (its torch.backends entry point)")
        if "torch.backends" not in _entry_points(emulator):
            problems.append(f"{emulator.name} declares no torch.backends entry point (the SDK's load at import torch)")
    if habana is not None and "torch.backends" in _entry_points(habana):
        problems.append(f"{habana.name} declares torch.backends; the emulator's distribution does")
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
    for split in SPLITS:
        integration = next((w for w in wheels if w.name.startswith(split.integration_prefix)), None)
        emulator = next((w for w in wheels if w.name.startswith(split.emulator_prefix)), None)
        problems.extend(_emulator_problems(split, integration, emulator))
    habana = next((w for w in wheels if w.name.startswith("lightning_accel_habana-")), None)
    gaudi_emulator = next((w for w in wheels if w.name.startswith("lightning_accel_habana_emulator-")), None)
    problems.extend(_gaudi_start_up_problems(habana, gaudi_emulator))
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
