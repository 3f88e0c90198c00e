"""Emulation of ``habana_frameworks.torch.utils.version_checker`` (plain Python in the SDK, the same rule here).

The SDK compares with ``packaging``; the emulator uses the copy of ``packaging`` torch ships (``torch._vendor``), the
same comparison, so that it needs no dependency of its own.
"""

from __future__ import annotations

import torch
from torch._vendor.packaging.version import InvalidVersion, Version

__all__ = ["is_pytorch_older_than"]


def is_pytorch_older_than(version: str) -> bool:
    """Whether the installed torch's release (local and pre-release parts dropped) is older than ``version``.

    Raises:
        ValueError: When ``version`` is not a version (PEP 440, such as ``"2.11"``).
    """
    try:
        wanted = Version(version)
    except (InvalidVersion, TypeError):
        raise ValueError(
            f"is_pytorch_older_than: version={version!r} is not a version; give one such as '2.11' (PEP 440)."
        ) from None
    return Version(Version(torch.__version__).base_version) < wanted
