"""Compiler annotations that do not change what the model computes: ``MultiConv`` and ``NameScope``.

Also the base class of custom argument parsers, whose registration the emulator leaves out.
"""

from __future__ import annotations

import abc
from typing import Any

__all__ = ["ICustomArgParser", "MultiConv", "NameScope"]


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
    """Base class of parsers for custom input types (``poptorch.registerCustomArgParser``, not emulated)."""

    @abc.abstractmethod
    def yieldTensors(self, struct: Any) -> None:
        """Yield the tensors of ``struct``."""

    @abc.abstractmethod
    def reconstruct(self, original_structure: Any, tensor_iterator: Any) -> Any:
        """Rebuild ``original_structure`` from tensors."""
