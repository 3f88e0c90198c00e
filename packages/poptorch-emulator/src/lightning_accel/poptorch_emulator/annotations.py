"""Compiler annotations that do not change what the model computes: ``MultiConv`` and ``NameScope``.

Also custom argument parsers: their base class and their registration, plain Python in poptorch 3.4
(``python/__init__.py:800-873``).
"""

from __future__ import annotations

import abc
import importlib
import importlib.util
from typing import Any

from .errors import Error
from .structures import custom_arg_parsers

__all__ = ["ICustomArgParser", "MultiConv", "NameScope", "registerCustomArgParser", "registerGeometricCustomArgParsers"]


class MultiConv:
    """Context manager: the convolutions inside it are planned together by Poplar (layout only, no numeric effect).

    Example:
        >>> with MultiConv().availableMemoryProportions(0.5).planType(0):
        ...     pass
    """

    def __init__(self) -> None:
        self.settings: dict[str, Any] = {}

    def _set(self, name: str, value: Any) -> MultiConv:
        self.settings[name] = value
        return self

    def availableMemoryProportions(self, value: Any) -> MultiConv:
        """Memory proportion for each convolution's temporaries."""
        return self._set("availableMemoryProportions", value)

    def partialsTypes(self, value: Any) -> MultiConv:
        """Type of each convolution's partial sums."""
        return self._set("partialsTypes", value)

    def enableConvDithering(self, value: Any) -> MultiConv:
        """Lay each convolution out from a different tile."""
        return self._set("enableConvDithering", value)

    def planType(self, value: Any) -> MultiConv:
        """``MultiConvPlanType.Parallel`` or ``Serial``."""
        return self._set("planType", value)

    def perConvReservedTiles(self, value: int) -> MultiConv:
        """Tiles reserved per convolution."""
        return self._set("perConvReservedTiles", value)

    def cycleBackOff(self, value: float) -> MultiConv:
        """Planner cycle back-off."""
        return self._set("cycleBackOff", value)

    def __enter__(self) -> MultiConv:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class NameScope:
    """Context manager prefixing the names of the operators created inside it (names only).

    Example:
        >>> with NameScope("encoder"):
        ...     pass
    """

    def __init__(self, name: str) -> None:
        assert isinstance(name, str), "Parameter to NameScope must be a string"
        self.name = name

    def __enter__(self) -> NameScope:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class ICustomArgParser(abc.ABC):
    """Base class of parsers for custom input types (see :func:`registerCustomArgParser`)."""

    @abc.abstractmethod
    def yieldTensors(self, struct: Any) -> None:
        """Yield the tensors of ``struct``."""

    @abc.abstractmethod
    def reconstruct(self, original_structure: Any, tensor_iterator: Any) -> Any:
        """Rebuild ``original_structure`` from tensors."""


def registerCustomArgParser(arg_data_type: type, arg_parser: ICustomArgParser | None) -> None:
    """Flatten and rebuild inputs of ``arg_data_type`` (and its subclasses) with ``arg_parser``; ``None`` removes it.

    Example:
        >>> class Pair:
        ...     def __init__(self, a, b):
        ...         self.a, self.b = a, b
        >>> class PairParser(ICustomArgParser):
        ...     def yieldTensors(self, struct):
        ...         yield struct.a
        ...         yield struct.b
        ...     def reconstruct(self, original, tensor_iterator):
        ...         return Pair(next(tensor_iterator), next(tensor_iterator))
        >>> registerCustomArgParser(Pair, PairParser())
        >>> registerCustomArgParser(Pair, None)
    """
    if arg_parser is None:
        custom_arg_parsers.pop(arg_data_type, None)
        return
    if not isinstance(arg_parser, ICustomArgParser):
        raise Error("arg_parser must inherit from ICustomArgParser")
    custom_arg_parsers[arg_data_type] = arg_parser


def registerGeometricCustomArgParsers() -> None:
    """Register PopTorch Geometric's parsers when ``poptorch_geometric`` is installed; otherwise do nothing."""
    try:
        if importlib.util.find_spec("poptorch_geometric") is None:
            return
        types = importlib.import_module("poptorch_geometric.types")
        types.registerCustomArgParsers()
    except ImportError:
        pass
