"""Flattening nested inputs and outputs (tuples, lists, dicts) into tensor leaves and back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["flatten", "map_tensors", "unflatten"]


def flatten(data: Any) -> tuple[list[Any], Any]:
    """Split ``data`` into its leaves (in order) and a spec to rebuild it with :func:`unflatten`."""
    leaves: list[Any] = []

    def walk(node: Any) -> Any:
        if isinstance(node, (tuple, list)):
            return (type(node), [walk(item) for item in node])
        if isinstance(node, dict):
            return (type(node), [(key, walk(value)) for key, value in node.items()])
        leaves.append(node)
        return None

    return leaves, walk(data)


def unflatten(leaves: list[Any], spec: Any) -> Any:
    """Rebuild the structure described by ``spec`` from ``leaves``."""
    iterator = iter(leaves)

    def build(node: Any) -> Any:
        if node is None:
            return next(iterator)
        kind, children = node
        if issubclass(kind, dict):
            return kind((key, build(child)) for key, child in children)
        items = [build(child) for child in children]
        if kind is tuple or kind is list:
            return kind(items)
        # namedtuples take their fields positionally
        return kind(*items)

    return build(spec)


def map_tensors(data: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor leaf of ``data``."""
    leaves, spec = flatten(data)
    return unflatten([fn(leaf) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves], spec)
