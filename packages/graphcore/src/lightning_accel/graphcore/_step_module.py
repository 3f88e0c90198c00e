"""The module poptorch compiles: a LightningModule's step for the trainer's current stage.

``self.log`` cannot run inside a compiled step: poptorch traces the step's Python once, when it compiles, and
later host calls run the compiled program. This module replaces ``self.log``, for the duration of the step, by a
recorder that turns every logged value into an extra output of the graph; the names and options of the logged
values are known once the step has been traced, and the strategy then calls the real ``self.log`` on the host with
the values each host call returns.

poptorch traces a shallow copy of this module (``copy.copy``), so what the trace records goes into an object the
copy shares with the original (:class:`LogBook`), never into an attribute assigned on the module.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
from lightning.pytorch import LightningModule

from lightning_accel.core.errors import ConfigurationError

__all__ = ["METRIC_ADVICE", "LogBook", "LogRecord", "StepModule"]

LogRecord = Tuple[str, Dict[str, Any]]  # typing names: evaluated at run time, on Python 3.8 too
METRIC_ADVICE = (
    "A torchmetrics Metric cannot be updated inside an IPU step: the step's Python runs once, when poptorch compiles "
    "it, so the metric would see one micro-batch (and hold tracing tensors on an IPU). Return the predictions and "
    "targets from the step (e.g. {'loss': loss, 'preds': preds, 'target': y}) and update the metric on the host in "
    "on_train_batch_end / on_validation_batch_end(outputs, ...), then self.log the metric there or at epoch end."
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
        if isinstance(value, torch.Tensor):
            tensor = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            # A Python number is a constant of the compiled graph on hardware.
            tensor = torch.tensor(float(value))
        else:
            raise ConfigurationError(
                f"self.log({name!r}, <{type(value).__name__}>) is not supported inside an IPU step: log a tensor or a "
                f"number. {METRIC_ADVICE}"
            )
        if tensor.numel() != 1:
            raise ConfigurationError(
                f"self.log({name!r}, value) needs a single number; got a tensor of shape {tuple(tensor.shape)}."
            )
        self.records.append((name, kwargs))
        self.values.append(tensor.reshape(()))


def _metric_updates(module: torch.nn.Module) -> dict[str, Any]:
    """The update count of every torchmetrics ``Metric`` in ``module`` (found by its ``_update_count``)."""
    return {
        name: getattr(sub, "_update_count", None)
        for name, sub in module.named_modules()
        if hasattr(sub, "_update_count") and callable(getattr(sub, "compute", None))
    }


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

    def __init__(self, module: LightningModule, loss_marker: Any = None) -> None:
        super().__init__()
        self.module = module
        self._loss_marker = loss_marker
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
            output = getattr(self.module, method)(*args)
        finally:
            object.__delattr__(self.module, "log")
        updated = [name for name, count in _metric_updates(self.module).items() if count != updates.get(name)]
        if updated:
            raise ConfigurationError(f"{method} updates the metric {updated[0]!r}. {METRIC_ADVICE}")
        if method == "training_step":
            output = self._mark_loss(output)
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
