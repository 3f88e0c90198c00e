"""Check the built wheels: one per distribution; the core and habana wheels carry their start-up hooks at the root.

Ray is only in the habana wheel's ``ray`` extra.
"""

from __future__ import annotations

import email.parser
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

EXPECTED = (
    "lightning_accel-",
    "lightning_accel_core-",
    "lightning_accel_habana-",
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
    if habana is not None and "_lightning_accel_habana_autoload.py" not in zipfile.ZipFile(habana).namelist():
        problems.append(f"{habana.name} lacks _lightning_accel_habana_autoload.py (its torch.backends entry point)")
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
