"""Lazy-mode graph boundaries: HPUs in lazy mode run what was queued since the last ``mark_step()`` as one graph.

The strategy marks a step after the backward pass, after the optimizer step and around each evaluation step, as the
Habana DDP strategy does. ``mark_step`` is a no-op in eager mode and on the emulator's eager backing.
"""

from __future__ import annotations

from typing import Any

from lightning_accel.habana import sdk

__all__ = ["MarkStepBoundaries"]


def _mark_step() -> None:
    sdk.core_module().mark_step()


class MarkStepBoundaries:
    """Mixin for a Lightning strategy: graph boundaries after updates and around evaluation steps."""

    def backward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the backward pass, then close the graph."""
        output = super().backward(*args, **kwargs)  # type: ignore[misc]
        _mark_step()
        return output

    def optimizer_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run the optimizer step, then close the graph."""
        output = super().optimizer_step(*args, **kwargs)  # type: ignore[misc]
        _mark_step()
        return output

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run one validation step as its own graph."""
        _mark_step()
        output = super().validation_step(*args, **kwargs)  # type: ignore[misc]
        _mark_step()
        return output

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run one test step as its own graph."""
        _mark_step()
        output = super().test_step(*args, **kwargs)  # type: ignore[misc]
        _mark_step()
        return output

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run one predict step as its own graph."""
        _mark_step()
        output = super().predict_step(*args, **kwargs)  # type: ignore[misc]
        _mark_step()
        return output
