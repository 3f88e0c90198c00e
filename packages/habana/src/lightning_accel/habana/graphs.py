"""A Trainer callback that runs a LightningModule's forward as HPU graphs: in training, evaluation and prediction."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils._pytree import tree_map
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = ["HPUGraphs", "check_graphed_callables", "graphed_callables_in"]

_STAGES = ("fit", "validate", "test", "predict")
_INFERENCE_STAGES = ("validate", "test", "predict")
# The SDK's own default for ModuleCacher(max_graphs=...) (bridge 1.19.0 hpu/graphs.py:952), which optimum-habana's
# use_hpu_graphs_for_training and Habana's Lightning examples use too.
_TRAINING_MAX_GRAPHS = 10


def _cloned(value: Any) -> Any:
    # The SDK keeps the capturing call's own input tensors as the graph's inputs and copies every later batch into
    # them (hpu/graphs.py:615, :644; :256, :403): fresh tensors keep the user's batches their own.
    return tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, value)


def graphed_callables_in(module: torch.nn.Module) -> list[str]:
    """The names of the submodules of ``module`` (``""`` for itself) that the SDK's ``make_graphed_callables`` graphed.

    Example:
        >>> graphed_callables_in(torch.nn.Linear(2, 2))
        []
    """
    found = []
    for name, sub in module.named_modules():
        forward = sub.__dict__.get("forward")
        # The SDK replaces the module's forward with a closure of make_graphed_callables (bridge bcc5172
        # hpu/graphs.py, make_graphed_forward); that function's name is what marks it.
        if "make_graphed_callables" in str(getattr(forward, "__qualname__", "")):
            found.append(name)
    return found


def check_graphed_callables(module: torch.nn.Module, accumulate_grad_batches: int) -> None:
    """Refuse gradient accumulation over modules graphed with the SDK's ``make_graphed_callables``.

    The SDK's graphed backward hands autograd its static gradient tensors (``static_grad_inputs``, detached views of
    the graph's own memory, bridge bcc5172 ``hpu/graphs.py``). A parameter without a gradient takes that tensor as
    its ``.grad``; the next micro-step's replay writes the new gradient into the same memory and autograd then adds
    it to itself: the accumulated gradient is twice the last micro-batch's, not the sum. The SDK has no accumulation
    mode for it (its ``ModuleCacher`` has, ``have_grad_accumulation``), so this refuses the run.

    Args:
        module: The model (a LightningModule or any module).
        accumulate_grad_batches: The Trainer's ``accumulate_grad_batches``.

    Raises:
        ConfigurationError: When ``accumulate_grad_batches > 1`` and a submodule was graphed.

    Example:
        >>> check_graphed_callables(torch.nn.Linear(2, 2), accumulate_grad_batches=4)
    """
    graphed = graphed_callables_in(module) if accumulate_grad_batches > 1 else []
    if graphed:
        names = ", ".join(repr(n or type(module).__name__) for n in graphed)
        raise ConfigurationError(
            f"accumulate_grad_batches={accumulate_grad_batches} is not accepted with modules graphed by "
            f"make_graphed_callables ({names}): the SDK's graphed backward hands its static gradient tensors to the "
            "parameters' .grad, so the next micro-step's replay overwrites them and the accumulated gradients are "
            "wrong (twice the last micro-batch's). Use accumulate_grad_batches=1, or graph training with "
            "HPUGraphs(stages=('fit',)) on an ungraphed module: its ModuleCacher is told each micro-step."
        )


def _check_fast_ddp_packing(strategy: Any, stages: tuple[str, ...]) -> None:
    """Refuse training graphs under fast_ddp whose packing runs as HPU graphs: every gradient would be doubled.

    ``ModuleCacher``'s graphed backward hands its static gradient tensors to the parameters' ``.grad``. fast_ddp's
    packing graphs capture those tensors, and before each backward pass give them back, zeroed, to the parameters
    whose gradient ``zero_grad`` set to None; the next replay of the training graph writes the new gradient into that
    same memory, and autograd then adds it to itself. Seen on the emulator: from the second step on, each gradient is
    twice DDP's. With ``use_hpu_graphs=False`` the gradients stay None between steps and the run matches DDP's.
    """
    from .strategies.fast_ddp import HPUFastDDPStrategy  # graphs is imported by the package; the strategy is not

    if not isinstance(strategy, HPUFastDDPStrategy) or strategy.use_hpu_graphs is False:
        return
    raise ConfigurationError(
        f"HPUGraphs(stages={stages!r}) with HPUFastDDPStrategy(use_hpu_graphs={strategy.use_hpu_graphs!r}) is not "
        "accepted: in lazy mode fast_ddp packs the gradients with HPU graphs that keep the gradient tensors they "
        "captured, which are the training graph's own static gradient tensors (ModuleCacher hands those to the "
        "parameters' .grad); the next replay writes the new gradient into that memory and autograd adds it to "
        "itself, so every gradient after the first step is doubled. Accepted: HPUFastDDPStrategy(use_hpu_graphs=False) "
        "with HPUGraphs(stages=('fit', ...)) (gradients as DDP's), or HPUGraphs without 'fit' in stages."
    )


class HPUGraphs(Callback):
    """Run the model's ``forward`` as HPU graphs, per Trainer stage, without code changes.

    Evaluation and prediction (``"validate"``, ``"test"``, ``"predict"``, the default): while such a stage runs,
    ``pl_module.forward`` is wrapped with the SDK's ``wrap_in_hpu_graph``; the first batch of each input shape
    captures a graph, later batches replay it. Outputs are copied out of the graph's static tensors, so predictions
    collected over batches stay distinct. The original ``forward`` is restored when the stage ends (and graphs are
    captured afresh at the next one).

    Training (``"fit"``, opt-in like optimum-habana's ``use_hpu_graphs_for_training``): while ``trainer.fit`` runs,
    ``pl_module`` is wrapped with the SDK's ``ModuleCacher`` (``ModuleCacher(max_graphs)(model=pl_module,
    inplace=True, allow_unused_input=...)``, as optimum-habana and Habana's Lightning examples wrap their model), so
    the forward and backward of ``self(...)`` in ``training_step`` are captured per input shape and replayed. The loss,
    optimizer step and everything else in ``training_step`` run as usual. Validation inside ``fit`` runs the plain
    forward (the SDK's ``ModuleCacher`` graphs training calls only), or inference graphs when ``"validate"`` is also
    chosen. With ``accumulate_grad_batches`` above 1 the cacher is told each micro-step (the SDK's
    ``have_grad_accumulation`` and ``set_iteration_count``), so gradients accumulate as without graphs. It is a stage
    of this callback, not a Trainer or strategy argument, because it is exactly the per-stage forward wrapping this
    callback already does, and callbacks are where Lightning puts such opt-in behaviour.

    Both wrap the caller's input tensors in fresh copies first: the SDK keeps a capture's inputs as the graph's and
    copies later batches into them, which would otherwise change a batch the user kept.

    As on Gaudi, a graph replays what its capture ran: Python control flow inside ``forward`` that depends on the
    data is frozen at capture, and data-dependent output shapes cannot be replayed. HPU graphs run in the SDK's lazy
    mode only (``PT_HPU_LAZY_MODE=1``): SDK 1.19 exports the graph APIs in lazy mode only, and from the 1.24 period
    on they are exported in eager mode too but creating a graph there raises ``RuntimeError`` (bridge bcc5172
    ``hpu/graphs.py:49-51``) while ``ModuleCacher`` runs the plain forward. The callback asks the SDK for its mode
    (``is_lazy()``) at set-up, so it refuses eager mode before the run whichever SDK is installed.

    Args:
        stages: Which of ``"fit"``, ``"validate"``, ``"test"``, ``"predict"`` run with graphs (the last three by
            default).
        max_graphs: How many input shapes get a graph, per stage: the first ``max_graphs`` shapes are captured and
            replayed, later ones run the original ``forward`` uncaptured (the SDK evicts nothing). ``None``: no limit
            in evaluation and prediction, the SDK's default of 10 in training (``ModuleCacher`` needs a number).
        allow_unused_input: For ``"fit"``, passed to ``ModuleCacher``: allow trainable parameters or inputs that do
            not reach the forward's outputs (their gradient is then zero). False, the SDK's default, makes them an
            error at the first capture.

    Raises:
        ConfigurationError: For an unknown stage or a bad ``max_graphs``; at set-up, when the SDK runs in eager mode,
            the model was compiled with ``torch.compile`` or the Trainer also has the ``HPUCompile`` callback (HPU
            graphs and compile cannot be combined), for ``"fit"`` when ``forward`` has ``*args`` (the SDK's
            ``ModuleCacher`` passes arguments by name), in ``fit`` with ``accumulate_grad_batches`` above 1 over
            modules graphed by ``make_graphed_callables`` (:func:`check_graphed_callables`), and for ``"fit"`` under
            :class:`~lightning_accel.habana.HPUFastDDPStrategy` unless its ``use_hpu_graphs=False`` (its packing
            graphs would double every gradient).

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUGraphs
        >>> graphs = HPUGraphs(stages=("fit", "validate", "test", "predict"))
        >>> trainer = Trainer(accelerator="hpu", devices=1, callbacks=[graphs])  # doctest: +SKIP
    """

    def __init__(
        self,
        stages: Iterable[str] = _INFERENCE_STAGES,
        max_graphs: int | None = None,
        allow_unused_input: bool = False,
    ) -> None:
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
        if not isinstance(allow_unused_input, bool):
            raise ConfigurationError(
                f"HPUGraphs(allow_unused_input={allow_unused_input!r}) is not accepted. Accepted: True or False."
            )
        self.stages = chosen
        self.max_graphs = max_graphs
        self.allow_unused_input = allow_unused_input
        self._saved: tuple[bool, Any] | None = None
        self._training_saved: tuple[bool, Any] | None = None
        #: The SDK's ModuleCacher of the running fit (None outside one); its statistics say what was graphed.
        self.cacher: Any = None

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Refuse eager mode (no HPU graphs there), a compiled model, and for ``"fit"`` a forward with ``*args``."""
        from .compilation import HPUCompile

        if any(isinstance(cb, HPUCompile) for cb in trainer.callbacks):  # type: ignore[attr-defined]
            from .compilation import _WITH_GRAPHS

            raise ConfigurationError(_WITH_GRAPHS)
        if stage == "fit":
            check_graphed_callables(pl_module, trainer.accumulate_grad_batches)
        # The SDK's own mode, never whether its graph names exist: from the 1.24 period on they exist in eager mode too.
        if not sdk.core_module().is_lazy():
            raise ConfigurationError(
                f"HPUGraphs(stages={self.stages!r}) needs the SDK's lazy mode: HPU graphs (wrap_in_hpu_graph, "
                "ModuleCacher) are captured from lazy-mode graphs, and the SDK runs in eager mode (PT_HPU_LAZY_MODE=0, "
                "the default since SDK 1.21), where SDK 1.24 refuses to create a graph (RuntimeError) and its "
                "ModuleCacher graphs nothing. Set PT_HPU_LAZY_MODE=1 before the process starts (lazy mode needs the "
                "Gaudi image's own PyTorch build), or drop the callback and use torch.compile(model, "
                "backend='hpu_backend') in eager mode."
            )
        if stage == "fit" and "fit" in self.stages:
            _check_fast_ddp_packing(trainer.strategy, self.stages)
        if getattr(pl_module, "_compiler_ctx", None) is not None:
            raise ConfigurationError(
                "HPUGraphs got a model compiled with torch.compile. HPU graphs and torch.compile cannot be combined "
                "(as on Gaudi): remove the HPUGraphs callback, or pass the uncompiled model."
            )
        if stage == "fit" and "fit" in self.stages:
            refused = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
            kinds = [p.kind for p in inspect.signature(pl_module.forward).parameters.values()]
            if any(kind in refused for kind in kinds):
                raise ConfigurationError(
                    f"HPUGraphs(stages={self.stages!r}) graphs training with the SDK's ModuleCacher, which calls "
                    f"forward with keyword arguments only, and {type(pl_module).__name__}.forward takes *args or "
                    "positional-only parameters (LightningModule's own forward does). Define forward with named "
                    "parameters and call it from training_step as self(...), or leave 'fit' out of stages."
                )

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Wrap the model with the SDK's ``ModuleCacher`` for training."""
        if "fit" not in self.stages or self._training_saved is not None:
            return
        self._training_saved = ("forward" in pl_module.__dict__, pl_module.__dict__.get("forward"))
        max_graphs = _TRAINING_MAX_GRAPHS if self.max_graphs is None else self.max_graphs
        self.cacher = sdk.hpu_module().ModuleCacher(max_graphs=max_graphs)
        # With accumulation, the SDK needs to be told each micro-step (on_train_batch_start): the first one's graph
        # hands its gradient tensors to the parameters' .grad, so the others need graphs of their own.
        self.cacher(
            model=pl_module,
            inplace=True,
            allow_unused_input=self.allow_unused_input,
            have_grad_accumulation=trainer.accumulate_grad_batches > 1,
        )
        graphed: Callable[..., Any] = pl_module.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            # Outputs are recomputed in place at the next replay; a training step uses them before then.
            return graphed(*_cloned(args), **_cloned(kwargs))

        pl_module.forward = forward  # type: ignore[method-assign]

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        """Tell the SDK's ``ModuleCacher`` which micro-step of a gradient accumulation this batch is."""
        if self.cacher is not None and trainer.accumulate_grad_batches > 1:
            # Lightning zeroes the gradients (to None) at the first batch of each accumulation window.
            self.cacher.set_iteration_count(batch_idx % trainer.accumulate_grad_batches)

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Restore the forward."""
        self._unwrap_training(pl_module)

    def _unwrap_training(self, pl_module: LightningModule) -> None:
        if self._training_saved is None:
            return
        had_own, original = self._training_saved
        self._training_saved = None
        self.cacher = None
        if had_own:
            pl_module.forward = original  # type: ignore[method-assign]
        else:
            pl_module.__dict__.pop("forward", None)
        # What ModuleCacher adds to the module (SDK 1.19 to 1.24): each holds the cacher, and left behind keeps it and
        # its graphs alive after the fit.
        for name in ("orig_forward", "set_iteration_count", "is_hpugraph_tracing", "capture_start", "capture_end"):
            pl_module.__dict__.pop(name, None)

    def _wrap(self, stage: str, pl_module: LightningModule) -> None:
        if stage not in self.stages or self._saved is not None:
            return
        self._saved = ("forward" in pl_module.__dict__, pl_module.__dict__.get("forward"))
        sdk.hpu_module().wrap_in_hpu_graph(pl_module, max_graphs=self.max_graphs)
        graphed: Callable[..., Any] = pl_module.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            # Graph outputs are static tensors, overwritten by the next replay: hand out copies.
            return _cloned(graphed(*_cloned(args), **_cloned(kwargs)))

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
        # What wrap_in_hpu_graph adds to the module (log_statistics from the SDK 1.24 period on): each holds the graph
        # cache, and left behind keeps the graphs alive.
        for name in ("clear_cache", "clear_inputs", "log_statistics"):
            pl_module.__dict__.pop(name, None)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """Restore the forward when a stage stops with an error."""
        self._unwrap(pl_module)
        self._unwrap_training(pl_module)

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
