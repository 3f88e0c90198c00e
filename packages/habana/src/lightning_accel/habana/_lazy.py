"""Graph boundaries for lazy mode, shared by the Trainer and Fabric strategies.

In lazy mode the HPU runs the operations queued since the last ``mark_step()`` as one graph. The strategies mark a
step after the backward pass and after the optimizer step (so that the update is its own graph) and around each
evaluation step. ``mark_step`` is a no-op in eager mode, so the strategies call it unconditionally.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from lightning_accel.core.emulation import emulation_settings

from . import sdk

__all__ = ["MarkStepAfterUpdates", "MarkStepAroundEvaluation", "mark_step"]


# mark_step runs two to four times per training step: resolve the SDK module once per emulation setting, not per call.
_resolved: tuple[object, ModuleType] | None = None


def mark_step() -> None:
    """Close the current lazy-mode graph."""
    global _resolved
    settings = emulation_settings()
    if _resolved is None or _resolved[0] is not settings:
        _resolved = (settings, sdk.core_module())
    _resolved[1].mark_step()


class MarkStepAfterUpdates:
    """Mixin: a graph boundary after ``backward`` and after ``optimizer_step``."""

    def backward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the backward pass, then close the graph."""
        output = super().backward(*args, **kwargs)  # type: ignore[misc]
        mark_step()
        return output

    def optimizer_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run the optimizer step, then close the graph."""
        output = super().optimizer_step(*args, **kwargs)  # type: ignore[misc]
        mark_step()
        return output


class MarkStepAroundEvaluation:
    """Mixin: graph boundaries before and after each validation, test and predict step."""

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run one validation step as its own graph."""
        mark_step()
        output = super().validation_step(*args, **kwargs)  # type: ignore[misc]
        mark_step()
        return output

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run one test step as its own graph."""
        mark_step()
        output = super().test_step(*args, **kwargs)  # type: ignore[misc]
        mark_step()
        return output

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run one predict step as its own graph."""
        mark_step()
        output = super().predict_step(*args, **kwargs)  # type: ignore[misc]
        mark_step()
        return output
