"""A Trainer callback that runs a LightningModule's evaluation and prediction forward as HPU graphs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils._pytree import tree_map
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = ["HPUGraphs"]

_STAGES = ("validate", "test", "predict")


class HPUGraphs(Callback):
    """Run the model's ``forward`` as HPU graphs during validation, testing and prediction, without code changes.

    While a chosen stage runs, ``pl_module.forward`` is wrapped with the SDK's ``wrap_in_hpu_graph``: the first
    batch of each input shape captures a graph, later batches replay it. Outputs are copied out of the graph's
    static tensors, so predictions collected over batches stay distinct. The original ``forward`` is restored when
    the stage ends (and graphs are captured afresh at the next one). Training is untouched; use the SDK's
    ``ModuleCacher`` for training graphs.

    As on Gaudi, a graph replays what its capture ran: Python control flow inside ``forward`` that depends on the
    data is frozen at capture, and data-dependent output shapes cannot be replayed.

    Args:
        stages: Which of ``"validate"``, ``"test"``, ``"predict"`` run with graphs (all by default).
        max_graphs: How many input shapes get a graph, per stage: the first ``max_graphs`` shapes are captured and
            replayed, later ones run the original ``forward`` uncaptured (the SDK's ``wrap_in_hpu_graph`` evicts
            nothing); no limit when ``None``.

    Raises:
        ConfigurationError: For an unknown stage or a bad ``max_graphs``; at set-up, when the SDK runs in eager mode
            or the model was compiled with ``torch.compile`` (HPU graphs and compile cannot be combined).

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUGraphs
        >>> trainer = Trainer(accelerator="hpu", devices=1, callbacks=[HPUGraphs()])  # doctest: +SKIP
    """

    def __init__(self, stages: Iterable[str] = _STAGES, max_graphs: int | None = None) -> None:
        chosen = (stages,) if isinstance(stages, str) else tuple(stages)
        unknown = [s for s in chosen if s not in _STAGES]
        if unknown or not chosen:
            raise ConfigurationError(
                f"HPUGraphs(stages={stages!r}) is not accepted. Accepted: a non-empty selection of "
                f"{', '.join(_STAGES)}."
            )
        if max_graphs is not None and (
            isinstance(max_graphs, bool) or not isinstance(max_graphs, int) or max_graphs < 1
        ):
            raise ConfigurationError(
                f"HPUGraphs(max_graphs={max_graphs!r}) is not accepted. Accepted: a positive int, or None for no limit."
            )
        self.stages = chosen
        self.max_graphs = max_graphs
        self._saved: tuple[bool, Any] | None = None

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Refuse eager mode (the SDK exports HPU graphs in lazy mode only) and a compiled model."""
        if not sdk.core_module().is_lazy():
            raise ConfigurationError(
                "HPUGraphs needs the SDK's lazy mode: the HPU graph APIs exist only with PT_HPU_LAZY_MODE=1, and the "
                "SDK runs in eager mode (PT_HPU_LAZY_MODE=0, the default since SDK 1.21). Set PT_HPU_LAZY_MODE=1 "
                "before the process starts, or drop the callback and use torch.compile(model, backend='hpu_backend') "
                "in eager mode."
            )
        if getattr(pl_module, "_compiler_ctx", None) is not None:
            raise ConfigurationError(
                "HPUGraphs got a model compiled with torch.compile. HPU graphs and torch.compile cannot be combined "
                "(as on Gaudi): remove the HPUGraphs callback, or pass the uncompiled model."
            )

    def _wrap(self, stage: str, pl_module: LightningModule) -> None:
        if stage not in self.stages or self._saved is not None:
            return
        self._saved = ("forward" in pl_module.__dict__, pl_module.__dict__.get("forward"))
        sdk.hpu_module().wrap_in_hpu_graph(pl_module, max_graphs=self.max_graphs)
        graphed: Callable[..., Any] = pl_module.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            # Graph outputs are static tensors, overwritten by the next replay: hand out copies.
            return tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, graphed(*args, **kwargs))

        pl_module.forward = forward  # type: ignore[method-assign]

    def _unwrap(self, pl_module: LightningModule) -> None:
        if self._saved is None:
            return
        had_own, original = self._saved
        self._saved = None
        if had_own:
            pl_module.forward = original  # type: ignore[method-assign]
        else:
            pl_module.__dict__.pop("forward", None)
        # What wrap_in_hpu_graph adds to the module: left behind, it keeps the graphs alive.
        for name in ("clear_cache", "clear_inputs"):
            pl_module.__dict__.pop(name, None)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """Restore the forward when evaluation or prediction stops with an error."""
        self._unwrap(pl_module)

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Wrap the forward for validation."""
        self._wrap("validate", pl_module)

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Restore the forward."""
        self._unwrap(pl_module)

    @override
    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Wrap the forward for testing."""
        self._wrap("test", pl_module)

    @override
    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Restore the forward."""
        self._unwrap(pl_module)

    @override
    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Wrap the forward for prediction."""
        self._wrap("predict", pl_module)

    @override
    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Restore the forward."""
        self._unwrap(pl_module)
