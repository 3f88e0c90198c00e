"""The operator names the SDK's autocast lists use: ATen operator names (``linear``, ``cross_entropy_loss``)."""

from __future__ import annotations

import functools

__all__ = ["SDK_ONLY_NAMES", "aten_operator_names", "is_functional_name"]

# Names in the SDK's own default and promote lists (autocast_helpers.h) that are no ATen operator (Python spellings);
# accepted so that a copy of the SDK's default list can be edited.
SDK_ONLY_NAMES = frozenset({"truediv", "iadd"})


@functools.cache
def aten_operator_names() -> frozenset[str]:
    """The base names (without overload) of every ATen operator registered with torch in this process."""
    import torch

    return frozenset(
        name.split("::", 1)[1].split(".", 1)[0]
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::")
    )


def is_functional_name(name: str) -> bool:
    """Whether the SDK gives operator ``name`` autocast kernels at all: not in-place, ``out=`` or backward."""
    return not (name.endswith(("_", "_out")) or "backward" in name)
