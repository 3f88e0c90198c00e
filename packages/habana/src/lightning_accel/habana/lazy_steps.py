"""Extra lazy-mode graph boundaries: a step mark between the forward and the backward pass.

The HPU strategies close a lazy-mode graph after the backward pass and after the optimizer step
(:mod:`lightning_accel.habana._lazy`), so the forward and backward passes of a step form one graph.
:class:`PipelineForwardBackward` adds a boundary before the backward pass, as optimum-habana's ``pipelining_fwd_bwd``
does: the HPU starts running the forward graph while the host is still building the backward one.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from . import _lazy, sdk

__all__ = ["PipelineForwardBackward"]


class PipelineForwardBackward(Callback):
    """Mark a lazy-mode step between the forward and the backward pass of every training step.

    optimum-habana's ``pipelining_fwd_bwd=True``. With it a training step has three graph boundaries instead of two
    (before backward, after backward, after the optimizer step). Lazy mode only: in eager mode there are no lazy
    graphs to split, so the callback refuses to start there rather than do nothing.

    Raises:
        ConfigurationError: At setup, when the SDK runs in eager mode (``PT_HPU_LAZY_MODE=0``).

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana.lazy_steps import PipelineForwardBackward
        >>> trainer = Trainer(accelerator="hpu", callbacks=[PipelineForwardBackward()])  # doctest: +SKIP
    """

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if not sdk.htcore.is_lazy():
            raise ConfigurationError(
                "PipelineForwardBackward (optimum-habana's pipelining_fwd_bwd) needs the SDK's lazy mode: it adds a "
                "graph boundary between forward and backward, and in eager mode (PT_HPU_LAZY_MODE=0) there are no "
                "lazy graphs, so it would do nothing. Start the process with PT_HPU_LAZY_MODE=1, or drop the callback."
            )

    @override
    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        # Lightning calls this hook just before the strategy runs the backward pass.
        _lazy.mark_step()
