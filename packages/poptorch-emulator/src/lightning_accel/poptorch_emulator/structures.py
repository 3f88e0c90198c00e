"""Flattening nested inputs and outputs (tuples, lists, dicts, custom types) into tensor leaves and back.

As poptorch 3.4 does (``python/_utils.py:67-130``): a type with a parser registered by
``poptorch.registerCustomArgParser`` (its class or a base class) yields its tensors through that parser and is rebuilt
by it; a namedtuple (``_fields`` and ``_asdict``) is rebuilt from its fields, and any other tuple or list, such as
``torch.return_types.max``, from one iterable of its items.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["custom_arg_parsers", "flatten", "get_custom_parser", "map_tensors", "unflatten"]

# Parsers registered with poptorch.registerCustomArgParser, by type (poptorch's _utils.custom_arg_parsers).
custom_arg_parsers: dict[type, Any] = {}


def get_custom_parser(value: Any) -> Any:
    """The parser registered for ``value``'s type, else for one of its base types, else ``None``."""
    if not custom_arg_parsers:
        return None
    parser = custom_arg_parsers.get(type(value))
    if parser is not None:
        return parser
    for kind, candidate in custom_arg_parsers.items():
        if isinstance(value, kind):
            return candidate
    return None


class _Custom:
    """The spec of a value a custom parser flattens: the parser and the original value."""

    __slots__ = ("original", "parser")

    def __init__(self, parser: Any, original: Any) -> None:
        self.parser = parser
        self.original = original


def flatten(data: Any) -> tuple[list[Any], Any]:
    """Split ``data`` into its leaves (in order) and a spec to rebuild it with :func:`unflatten`."""
    leaves: list[Any] = []

    def walk(node: Any) -> Any:
        parser = get_custom_parser(node)
        if parser is not None:
            leaves.extend(parser.yieldTensors(node))
            return _Custom(parser, node)
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
        if isinstance(node, _Custom):
            return node.parser.reconstruct(node.original, iterator)
        kind, children = node
        if issubclass(kind, dict):
            return kind((key, build(child)) for key, child in children)
        items = [build(child) for child in children]
        if kind is tuple or kind is list:
            return kind(items)
        if hasattr(kind, "_fields") and hasattr(kind, "_asdict"):
            # namedtuples take their fields positionally
            return kind(*items)
        # torch.return_types and other structure sequences, tuple and list subclasses: one iterable
        return kind(items)

    return build(spec)


def map_tensors(data: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor leaf of ``data``."""
    leaves, spec = flatten(data)
    return unflatten([fn(leaf) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves], spec)
