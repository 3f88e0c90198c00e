"""The module poptorch compiles: a LightningModule's step for the trainer's current stage.

``self.log`` cannot run inside a compiled step: poptorch traces the step's Python once, when it compiles, and
later host calls run the compiled program. This module replaces ``self.log``, for the duration of the step, by a
recorder that turns every logged value into an extra output of the graph; the names and options of the logged
values are known once the step has been traced, and the strategy then calls the real ``self.log`` on the host with
the values each host call returns.

poptorch traces a shallow copy of this module (``copy.copy``), so what the trace records goes into an object the
copy shares with the original (:class:`LogBook`), never into an attribute assigned on the module.

Nothing this module adds to the user's step may run outside a pipeline block: once a ``with poptorch.Block(...)``
has ended, poptorch refuses every operation until the next block starts ("No active Block, all the ops must belong
to a Block", ``popart_compiler/source/CompilerImpl.cpp:424-427``). So the recorder logs the tensor it is given
without any operation (a Python number stays on the host), and the loss marker runs inside the block the step
entered last.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Dict, Optional, Tuple

import torch
from lightning.pytorch import LightningModule

from lightning_accel.core.errors import ConfigurationError

__all__ = ["METRIC_ADVICE", "LogBook", "LogRecord", "StepModule", "metric_states_kept_on_host"]

# The name, the options and, for a Python number, its value (kept on the host); typing names: evaluated at run
# time, on Python 3.8 too.
LogRecord = Tuple[str, Dict[str, Any], Optional[float]]
METRIC_ADVICE = (
    "A torchmetrics Metric cannot be updated inside an IPU step: the step's Python runs once, when poptorch compiles "
    "it, so the metric would see one micro-batch (and hold tracing tensors on an IPU). Return the predictions and "
    "targets from the step (e.g. {'loss': loss, 'preds': preds, 'target': y}) and update the metric on the host in "
    "on_train_batch_end / on_validation_batch_end(outputs, ...), then self.log the metric there or at epoch end "
    "(IPUStrategy keeps the metric's states on the host when poptorch compiles, which moves the whole module to the "
    "IPU and back only its parameters and buffers)."
)


class LogBook:
    """The names and options of the values logged by the step traced last (shared by shallow copies)."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.traces = 0


class _LogRecorder:
    """Stands in for ``LightningModule.log`` inside a compiled step."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.values: list[torch.Tensor] = []

    def __call__(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        if args:
            raise ConfigurationError(
                f"self.log({name!r}, ...) on IPUs takes its options as keyword arguments (prog_bar=..., on_step=...)."
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # A Python number is a constant of the compiled step: it stays on the host.
            self.records.append((name, kwargs, float(value)))
            return
        if not isinstance(value, torch.Tensor):
            raise ConfigurationError(
                f"self.log({name!r}, <{type(value).__name__}>) is not supported inside an IPU step: log a tensor or a "
                f"number. {METRIC_ADVICE}"
            )
        if value.numel() != 1:
            raise ConfigurationError(
                f"self.log({name!r}, value) needs a single number; got a tensor of shape {tuple(value.shape)}."
            )
        # Returned as it is (no reshape: an operation after the step's last block would not compile on IPUs); the
        # host takes the mean of what comes back.
        self.records.append((name, kwargs, None))
        self.values.append(value)


class _LastBlock:
    """Follows the ``with poptorch.Block(...)`` blocks a step enters, to run more operations inside the last one.

    ``Block.__enter__`` starts a block through ``Block.start`` and ``Block.__exit__`` ends it (poptorch 3.4
    ``python/ops.py:614-626``; ``BlockFunction`` uses the same). While the step runs, both are wrapped so that the
    last block's ids are known; :meth:`reopen` starts that block again when the step ended outside any block. Blocks
    with the same ``user_id`` are one block in poptorch, and one without ``user_id`` on the same IPU joins that
    IPU's stage, so the pipeline keeps its stages. ``BeginBlock`` blocks never end, so they need nothing.
    """

    def __init__(self, block: Any) -> None:
        self._block = block
        self.last: tuple[Any, Any] | None = None
        self.ended = False

    def __enter__(self) -> _LastBlock:
        block = self._block
        if block is None:
            return self
        self._block_start = block.__dict__["start"]
        self._exit = block.__dict__["__exit__"]
        start, end = self._block_start.__func__, self._exit

        def tracked_start(user_id: Any = None, ipu_id: Any = None) -> Any:
            self.last, self.ended = (user_id, ipu_id), False
            return start(user_id, ipu_id)

        def tracked_exit(instance: Any, *exc: Any) -> Any:
            result = end(instance, *exc)
            self.ended = True
            return result

        block.start = staticmethod(tracked_start)
        block.__exit__ = tracked_exit
        return self

    def __exit__(self, *exc: object) -> None:
        if self._block is not None:
            self._block.start = self._block_start
            self._block.__exit__ = self._exit

    def reopen(self) -> None:
        """Start the last block again if the step left it (and no other block started since)."""
        if self._block is not None and self.ended and self.last is not None:
            self._block_start.__func__(*self.last)
            self.ended = False


def _metric_updates(module: torch.nn.Module) -> dict[str, Any]:
    """The update count of every torchmetrics ``Metric`` in ``module`` (found by its ``_update_count``)."""
    return {
        name: getattr(sub, "_update_count", None)
        for name, sub in module.named_modules()
        if hasattr(sub, "_update_count") and callable(getattr(sub, "compute", None))
    }


# What torchmetrics' Metric._apply moves besides the states named in _defaults.
_METRIC_MOVED = ("_device", "_dtype", "_computed", "_forward_cache")


@contextlib.contextmanager
def metric_states_kept_on_host(module: torch.nn.Module) -> Iterator[None]:
    """Keep every torchmetrics ``Metric``'s states where they are while poptorch compiles ``module``.

    poptorch compiles by moving the whole module tree to ``ipu:0`` and then moves back only the parameters and
    buffers (poptorch 3.4 ``python/_poplar_executor.py:737-739, 894-916``). ``Metric._apply`` moves its states, their
    defaults and cached results along, and they would stay on the IPU, where any later ``update()``, ``compute()`` or
    ``reset()`` on the host raises "There is no active dispatch". The same objects are put back afterwards, as
    poptorch puts back the parameters.
    """
    saved = []
    for metric in module.modules():
        defaults = getattr(metric, "_defaults", None)
        if not isinstance(defaults, dict) or not hasattr(metric, "_update_count"):
            continue
        states = {name: getattr(metric, name) for name in defaults if hasattr(metric, name)}
        moved = {name: metric.__dict__[name] for name in _METRIC_MOVED if name in metric.__dict__}
        saved.append((metric, defaults, dict(defaults), states, moved))
    try:
        yield
    finally:
        for metric, live, defaults, states, moved in saved:
            # Metric._apply replaces the defaults in the same dict.
            live.clear()
            live.update(defaults)
            for name, value in states.items():
                setattr(metric, name, value)
            metric.__dict__.update(moved)


class StepModule(torch.nn.Module):
    """Runs ``training_step``/``validation_step``/``test_step``/``predict_step`` of ``module`` by trainer stage.

    Its forward returns ``(step_output, logged_values)``; :attr:`log_book` names the logged values of the step traced
    last, and counts the traces.

    Example:
        >>> from lightning.pytorch.demos.boring_classes import BoringModel
        >>> step = StepModule(BoringModel())
        >>> isinstance(step.module, LightningModule)
        True
    """

    def __init__(self, module: LightningModule, loss_marker: Any = None, block: Any = None) -> None:
        super().__init__()
        self.module = module
        self._loss_marker = loss_marker
        # The SDK's poptorch.Block, to place the loss marker inside the step's last block.
        self._block = block
        self.log_book = LogBook()

    def _method(self) -> str:
        trainer = self.module.trainer
        if trainer.training:
            return "training_step"
        if trainer.testing:
            return "test_step"
        if trainer.predicting:
            return "predict_step"
        return "validation_step"

    def forward(self, *args: Any) -> tuple[Any, tuple[torch.Tensor, ...]]:
        method = self._method()
        updates = _metric_updates(self.module)
        recorder = _LogRecorder()
        # An instance attribute shadows LightningModule.log for the duration of the step only.
        object.__setattr__(self.module, "log", recorder)
        try:
            with _LastBlock(self._block if method == "training_step" else None) as blocks:
                output = getattr(self.module, method)(*args)
                updated = [name for name, count in _metric_updates(self.module).items() if count != updates.get(name)]
                if updated:
                    raise ConfigurationError(f"{method} updates the metric {updated[0]!r}. {METRIC_ADVICE}")
                if method == "training_step":
                    blocks.reopen()
                    output = self._mark_loss(output)
        finally:
            object.__delattr__(self.module, "log")
        self.log_book.records = recorder.records
        self.log_book.traces += 1
        return output, tuple(recorder.values)

    def _mark_loss(self, output: Any) -> Any:
        """Make the returned loss the graph's final loss (a torch loss function feeding it is folded into it)."""
        if isinstance(output, torch.Tensor):
            return self._loss_marker(output, reduction="none") if self._loss_marker else output
        if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
            marked = self._loss_marker(output["loss"], reduction="none") if self._loss_marker else output["loss"]
            return {**output, "loss": marked}
        raise ConfigurationError(
            f"training_step returned {type(output).__name__}; on IPUs it must return the loss tensor or a dict with a "
            "'loss' tensor (skipping a step by returning None is not possible: the step is compiled)."
        )
