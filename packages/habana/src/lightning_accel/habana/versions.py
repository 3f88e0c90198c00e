"""The torch versions lightning-accel-habana (and lightning-accel-deepspeed-hpu, built on it) support, and why.

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

__all__ = ["SUPPORTED_TORCH", "torch_version_warning"]

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
