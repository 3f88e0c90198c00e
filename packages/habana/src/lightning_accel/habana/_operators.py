"""Operator names as mixed-precision operator lists spell them (shared by the precision plugin and the emulator)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["known_operators", "operator_name"]

_DUNDER_BASES = frozenset({"add", "sub", "mul", "matmul", "truediv", "floordiv", "pow", "mod", "and", "or", "xor"})


def operator_name(func: Callable[..., Any]) -> str:
    """The list name of ``func``: ``torch.nn.functional.linear`` is ``linear``, ``Tensor.__matmul__`` is ``matmul``.

    Reflected and in-place dunders (``__rmul__``, ``__iadd__``) keep their plain name.
    """
    name = getattr(func, "__name__", "") or ""
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name.startswith(("r", "i")) and name[1:] in _DUNDER_BASES:
            name = name[1:]
    return name


@functools.cache
def known_operators() -> frozenset[str]:
    """Every name an operator list may contain.

    These are the public functions of ``torch``, ``torch.nn.functional``, ``torch.special``, ``torch.linalg``,
    ``torch.fft`` and the methods of ``torch.Tensor``.
    """
    import torch

    names: set[str] = set()
    for namespace in (torch, torch.nn.functional, torch.Tensor, torch.special, torch.linalg, torch.fft):
        for attr in dir(namespace):
            value = getattr(namespace, attr, None)
            if not callable(value) or isinstance(value, type):
                continue
            if attr.startswith("__") and attr.endswith("__"):
                names.add(operator_name(value) or attr[2:-2])
            elif not attr.startswith("_"):
                names.add(attr)
    return frozenset(names)
