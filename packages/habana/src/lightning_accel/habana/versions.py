"""The torch versions lightning-accel-habana (and lightning-accel-deepspeed-hpu) support; the stacks validated together.

Gaudi users run the torch build of their Intel Gaudi software, so this package does not require torch from the
package index (pip would replace Intel's build). Instead every torch name our packages call is checked, from torch's
sources, against each version below (``tools/torch_names.py``, run by CI), and :func:`torch_version_warning` says when
the running torch is not one of them.

Example:
    >>> torch_version_warning("2.10.0a0+git1234") is None
    True
    >>> "2.8" in torch_version_warning("2.8.0")
    True
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import NamedTuple

__all__ = [
    "COMPONENTS",
    "SUPPORTED_TORCH",
    "ValidatedStack",
    "VALIDATED_STACKS",
    "StackVerdict",
    "check_stack",
    "environment",
    "installed_stack",
    "markdown_table",
    "startup_warning",
    "torch_version_warning",
]

#: Every torch version the Gaudi packages support (major.minor.patch), with the release that ships it.
#:
#: Intel's support matrix for Intel Gaudi software 1.23.0 lists "PyTorch 2.9" without a patch number (2.9.1 is our
#: assumption); 1.24.0 ships 2.10 and 1.24.1 ships 2.11 (vllm-gaudi's README; the bridge of that period,
#: gaudi-pytorch-bridge bcc5172, builds for 2.9.1, 2.10.0 and 2.11.0 in .devops/build_profiles/profiles.json). 2.13.0 is
#: the torch the SDK emulator is built for.
SUPPORTED_TORCH: dict[str, str] = {
    "2.9.1": "Intel Gaudi software 1.23",
    "2.10.0": "Intel Gaudi software 1.24.0",
    "2.11.0": "Intel Gaudi software 1.24.1",
    "2.13.0": "the Gaudi SDK emulator's torch",
}


def _major_minor(version: str) -> str | None:
    found = re.match(r"(\d+)\.(\d+)", version)
    return f"{found.group(1)}.{found.group(2)}" if found else None


def torch_version_warning(version: str) -> str | None:
    """A warning for a torch ``version`` whose major.minor is none of :data:`SUPPORTED_TORCH`'s, else ``None``.

    Intel's builds carry a local part (``2.10.0a0+git...``, ``2.10.0+hpu...``): only major.minor is compared.
    """
    supported = {_major_minor(known): known for known in SUPPORTED_TORCH}
    if _major_minor(version) in supported:
        return None
    listed = ", ".join(f"{known} ({why})" for known, why in SUPPORTED_TORCH.items())
    return (
        f"torch {version} is not a version lightning-accel-habana is checked against: {listed}. The torch names it "
        "calls were verified in those versions' sources only; install the torch of a supported Intel Gaudi software "
        "release, or report what fails."
    )


# --- The validated stacks -------------------------------------------------------------------------------------------
# This module is also loaded by path (tools/torch_names.py), without its package: only the standard library at import;
# packaging, torch and the SDK are imported inside the functions that need them.


class ValidatedStack(NamedTuple):
    """One validated combination of Gaudi software, torch, Lightning, transformers and DeepSpeed.

    Each component is written as its validators name it. How a found version is compared: the SDK on
    major.minor.patch (``1.24.0`` matches the wheel ``1.24.0.524``), torch, Lightning and transformers on major.minor
    (Intel's torch builds carry local parts such as ``2.10.0a0+git...``), DeepSpeed on the SDK release in the version of
    Intel's fork (``0.16.1+hpu.synapse.v1.24.0``: ``1.24``). A value starting with a comparison operator
    (``>=4.40``) is a PEP 440 specifier on the release instead. transformers and DeepSpeed are compared only when
    installed.

    Example:
        >>> VALIDATED_STACKS[0].torch
        '2.9.1'
    """

    name: str
    sdk: str
    torch: str
    lightning: str
    transformers: str
    deepspeed: str
    #: Validated on Gaudi hardware by Intel and optimum-habana (``False``: this project's emulator row).
    hardware: bool
    #: Who validated which component, and where it is written.
    sources: tuple[str, ...]


_OPTIMUM_REPO = "https://github.com/huggingface/optimum-habana"
_LIGHTNING_SOURCE = (
    "Lightning: the version this project tests (noxfile.py LIGHTNING = 'lightning==2.6.6'; lightning-accel-habana's "
    "plugin declares lightning='>=2.6,<2.7')"
)

#: The validated table. Intel's support matrix for each release names its torch; optimum-habana's release for that
#: SDK names its transformers (setup.py) and the DeepSpeed fork its README installs
#: (``pip install git+https://github.com/HabanaAI/DeepSpeed.git@<tag>``).
VALIDATED_STACKS: tuple[ValidatedStack, ...] = (
    ValidatedStack(
        name="Intel Gaudi software 1.23.0",
        sdk="1.23.0",
        torch="2.9.1",
        lightning="2.6.6",
        transformers="4.55",
        deepspeed="1.23.0",
        hardware=True,
        sources=(
            "torch: Intel Gaudi support matrix 1.23.0 ('PyTorch 2.9'; the patch 2.9.1 is the bridge's build profile, "
            "gaudi-pytorch-bridge bcc5172 .devops/build_profiles/profiles.json)",
            f"transformers, DeepSpeed: optimum-habana v1.20.0 ({_OPTIMUM_REPO}/tree/v1.20.0): README 'validated with "
            "Intel Gaudi v1.23 stack' and DeepSpeed.git@1.23.0; setup.py 'transformers >= 4.55.0, < 4.56.0'",
            _LIGHTNING_SOURCE,
        ),
    ),
    ValidatedStack(
        name="Intel Gaudi software 1.24.0",
        sdk="1.24.0",
        torch="2.10.0",
        lightning="2.6.6",
        transformers="4.55",
        deepspeed="1.24.0",
        hardware=True,
        sources=(
            "torch: vllm-gaudi's README (1.24.0 ships torch 2.10) and gaudi-pytorch-bridge bcc5172's build profiles",
            "transformers: optimum-habana 1.21.0 and 1.21.2 on PyPI ('validated with Intel Gaudi v1.24 stack'; 'The "
            "final release is v1.21.2 (Intel Gaudi Software 1.24, Transformers 4.55.x)'); setup.py of its 1.21 "
            "development line 'transformers >= 4.55.0, < 4.56.0'",
            "DeepSpeed: HabanaAI/DeepSpeed tag 1.24.0, following the tag-per-release optimum-habana's README installs "
            "(1.22.0 in v1.19.x, 1.23.0 in v1.20.0); the 1.21.x README was not read here",
            _LIGHTNING_SOURCE,
        ),
    ),
    ValidatedStack(
        name="Intel Gaudi software 1.24.1",
        sdk="1.24.1",
        torch="2.11.0",
        lightning="2.6.6",
        transformers="4.55",
        deepspeed="1.24.0",
        hardware=True,
        sources=(
            "torch: vllm-gaudi's README (1.24.1 ships torch 2.11) and gaudi-pytorch-bridge bcc5172's build profiles",
            "transformers: optimum-habana 1.21.x, validated with 'Intel Gaudi v1.24 stack' (PyPI), which names no "
            "patch release",
            "DeepSpeed: as for 1.24.0 (optimum-habana names no fork tag per 1.24 patch release)",
            _LIGHTNING_SOURCE,
        ),
    ),
    ValidatedStack(
        name="Gaudi SDK emulator (this project's CI)",
        sdk="1.24.0",
        torch="2.13.0",
        lightning="2.6.6",
        transformers=">=4.40",
        deepspeed=">=0.16.1,<0.20",
        hardware=False,
        sources=(
            "SDK: lightning-accel-habana-emulator's habana_frameworks.torch.version (1.24.0, the bridge bcc5172 it "
            "plays); torch: noxfile.py TORCH; transformers: noxfile.py REAL_MODELS; DeepSpeed: lightning-accel-"
            "deepspeed-hpu's requirement. Checked on the emulator only: not a Gaudi stack (the SDK's torch builds "
            "refuse a torch of another major.minor when they load)",
            _LIGHTNING_SOURCE,
        ),
    ),
)

#: The components of a stack, in table order, with the names users know them by.
COMPONENTS: dict[str, str] = {
    "sdk": "SDK",
    "torch": "torch",
    "lightning": "Lightning",
    "transformers": "transformers",
    "deepspeed": "DeepSpeed",
}
_DEPTH = {"sdk": 3, "torch": 2, "lightning": 2, "transformers": 2, "deepspeed": 2}
_OPTIONAL = ("transformers", "deepspeed")
_FORK = re.compile(r"hpu\.synapse\.v(\d+(?:\.\d+)*)")


def _release(version: str, depth: int) -> tuple[int, ...] | None:
    found = re.match(r"\d+(?:\.\d+)*", version)
    if not found:
        return None
    parts = tuple(int(part) for part in found.group(0).split("."))
    return (parts + (0,) * depth)[:depth]


def _matches(component: str, found: str, validated: str) -> bool:
    if validated[:1] in "<>=!~":
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            return SpecifierSet(validated).contains(Version(found).base_version, prereleases=True)
        except InvalidVersion:
            return False
    if component == "deepspeed":
        fork = _FORK.search(found)
        if fork is None:
            return False
        found = fork.group(1)
    depth = _DEPTH[component]
    return _release(found, depth) == _release(validated, depth) is not None


def _shown(component: str, value: str) -> str:
    if component == "deepspeed" and value[:1] not in "<>=!~":
        return f"HabanaAI/DeepSpeed {value}"
    return value


def _describe(row: ValidatedStack) -> str:
    parts = ", ".join(f"{label} {_shown(key, getattr(row, key))}" for key, label in COMPONENTS.items())
    return f"{row.name} ({parts})"


class StackVerdict(NamedTuple):
    """Whether a stack is in :data:`VALIDATED_STACKS`, the row it is in or nearest to, and what differs.

    Example:
        >>> found = {"sdk": "1.24.0.524", "torch": "2.10.0a0+gitabc", "lightning": "2.6.6", "transformers": None,
        ...          "deepspeed": None}
        >>> check_stack(found).validated
        True
    """

    validated: bool
    row: ValidatedStack
    #: Components whose found version is not the row's: ``{component: (found, validated)}``.
    differences: dict[str, tuple[str, str]]
    found: dict[str, str | None]

    @property
    def message(self) -> str:
        """One line for users: the verdict, what was found and the row."""
        found = ", ".join(
            f"{label} {self.found.get(key) or ('unknown' if key == 'sdk' else 'not installed')}"
            for key, label in COMPONENTS.items()
        )
        if self.validated:
            return f"validated (row {self.row.name!r}): found {found}."
        differs = "; ".join(
            f"{COMPONENTS[key]} {was} where the row has {_shown(key, wanted)}"
            for key, (was, wanted) in self.differences.items()
        )
        return (
            f"not a validated stack: found {found}. The nearest validated row is {_describe(self.row)}; it differs in "
            f"{differs}. Runs may still work, but this combination was not validated together: install the row's "
            "versions (docs/habana/basic.md, 'Supported releases'), or report what fails with `lightning-accel env`."
        )


def check_stack(found: Mapping[str, str | None]) -> StackVerdict:
    """Compare ``found`` (component to installed version, ``None`` when absent) with every validated row.

    Every row can validate ``found``; the nearest row of a stack outside is a hardware row (the emulator's torch is no
    advice for a Gaudi machine): the one with the same SDK release, then the fewest differences, then the newest. A
    missing SDK or torch version differs from every row; a missing transformers or DeepSpeed is not compared.

    Raises:
        ValueError: When ``found`` names a component that is not one of :data:`COMPONENTS`.
    """
    unknown = sorted(set(found) - set(COMPONENTS))
    if unknown:
        raise ValueError(
            f"check_stack(found=...): unknown component(s) {unknown}; accepted: {list(COMPONENTS)}. Pass each "
            "component's installed version, or None when it is not installed."
        )
    scored = []
    for index, row in enumerate(VALIDATED_STACKS):
        differences: dict[str, tuple[str, str]] = {}
        for key in COMPONENTS:
            version = found.get(key)
            validated = getattr(row, key)
            if version is None and key in _OPTIONAL:
                continue
            if version is None or not _matches(key, version, validated):
                differences[key] = (version or "unknown", validated)
        if not differences:
            return StackVerdict(True, row, differences, dict(found))
        scored.append(((not row.hardware, "sdk" in differences, len(differences), -index), row, differences))
    _, row, differences = min(scored, key=lambda item: item[0])
    return StackVerdict(False, row, differences, dict(found))


def _distribution_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def installed_stack() -> dict[str, str | None]:
    """The versions of this process's stack: the SDK (through the seam), torch, Lightning, transformers, DeepSpeed.

    torch's is ``torch.__version__`` once torch is imported (the build running), else its distribution's. Nothing is
    imported to read transformers and DeepSpeed.
    """
    from lightning_accel.habana.sdk import sdk_version

    torch = sys.modules.get("torch")
    return {
        "sdk": sdk_version(),
        "torch": str(torch.__version__) if torch is not None else _distribution_version("torch"),
        "lightning": _distribution_version("lightning") or _distribution_version("pytorch-lightning"),
        "transformers": _distribution_version("transformers"),
        "deepspeed": _distribution_version("deepspeed"),
    }


def startup_warning() -> str | None:
    """The one warning a process gets when its first HPU is set up, or ``None`` when the stack is validated.

    A torch none of :data:`SUPPORTED_TORCH` names gets :func:`torch_version_warning`'s text first, in the same
    warning: one warning per process, whatever is off.
    """
    verdict = check_stack(installed_stack())
    if verdict.validated:
        return None
    torch_message = torch_version_warning(verdict.found["torch"] or "unknown")
    stack_message = f"lightning-accel-habana: {verdict.message}"
    return f"{torch_message} {stack_message}" if torch_message else stack_message


def environment() -> dict[str, str]:
    """The lines ``lightning-accel env`` prints for the Gaudi stack (the plugin's ``environment`` hook)."""
    from lightning_accel.habana.sdk import is_sdk_installed

    if not is_sdk_installed():
        return {"validated versions": "no Habana SDK (nor its emulator) in this environment: nothing to check"}
    return {"validated versions": check_stack(installed_stack()).message}


def markdown_table() -> str:
    """:data:`VALIDATED_STACKS` as the Markdown table docs/habana/basic.md shows (a test keeps the two equal)."""
    header = "| " + " | ".join(["row", *COMPONENTS.values()]) + " |"
    lines = [header, "| " + " | ".join(["---"] * (len(COMPONENTS) + 1)) + " |"]
    for row in VALIDATED_STACKS:
        cells = [row.name, *(_shown(key, getattr(row, key)) for key in COMPONENTS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
