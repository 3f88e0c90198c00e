"""A process-wide setting that holds for one run: a ``Trainer`` callback, or a context manager around Fabric code.

optimum-habana sets some knobs (Dynamo's limits, torch's math-attention reduction) for the whole process. The
callbacks that stand for them in Lightning set them when the run sets up and put the previous values back when it
tears down or fails, so a notebook's next run, or another Trainer in the process, starts from what was there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any

from lightning.pytorch import Callback
from typing_extensions import Self, override

__all__ = ["RunSetting"]


class RunSetting(Callback, ABC):
    """Apply a setting in ``setup`` (or on entering the ``with`` block) and restore it in ``teardown`` (or on leaving).

    Subclasses implement :meth:`apply` and :meth:`restore`; both must be safe to call twice.

    Example:
        >>> class Quiet(RunSetting):
        ...     def apply(self) -> None: ...
        ...     def restore(self) -> None: ...
        >>> with Quiet():
        ...     pass
    """

    @abstractmethod
    def apply(self) -> None:
        """Set the setting, keeping what it replaces."""

    @abstractmethod
    def restore(self) -> None:
        """Put back what :meth:`apply` replaced."""

    def __enter__(self) -> Self:
        self.apply()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.restore()

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.apply()

    @override
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.restore()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.restore()
