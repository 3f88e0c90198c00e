"""One HPU in one process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.strategies import SingleDeviceStrategy
from typing_extensions import override

from .._accelerator_check import RequiresHPUAccelerator
from .._compile_default_backend import TrainerCompilesWithHPUBackend
from .._devices import RootDevice
from .._inductor_hint import explain_inductor_failure
from .._lazy import MarkStepAfterUpdates, MarkStepAroundEvaluation
from .._strategy_defaults import HPUCheckpointIODefault
from ._precision import HPUPrecisionSetter

if TYPE_CHECKING:
    from lightning.fabric.plugins import CheckpointIO
    from lightning.pytorch.accelerators import Accelerator
    from lightning.pytorch.plugins.precision import Precision

__all__ = ["SingleHPUStrategy"]


class SingleHPUStrategy(
    TrainerCompilesWithHPUBackend,
    RequiresHPUAccelerator,
    HPUPrecisionSetter,
    HPUCheckpointIODefault,
    MarkStepAfterUpdates,
    MarkStepAroundEvaluation,
    SingleDeviceStrategy,
):
    """Train on one HPU (``strategy="hpu_single"``).

    In lazy mode it closes the HPU graph after the backward pass, after the optimizer step and around each evaluation
    step. Checkpoints go through :class:`~lightning_accel.habana.HPUCheckpointIO` unless you pass another one.

    Args:
        device: The HPU: ``"hpu"``, ``"hpu:N"``, ``torch.device("hpu")`` or an index.
        accelerator: The accelerator (normally set by the Trainer).
        checkpoint_io: Checkpoint I/O; :class:`HPUCheckpointIO` by default.
        precision_plugin: Precision plugin; Lightning's plugin for ``precision=`` becomes an
            :class:`~lightning_accel.habana.HPUPrecisionPlugin`.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUAccelerator, SingleHPUStrategy
        >>> trainer = Trainer(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy(), devices=1)  # doctest: +SKIP
    """

    strategy_name = "hpu_single"

    def __init__(
        self,
        device: torch.device | str | int = "hpu",
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
    ) -> None:
        given = torch.device("hpu", device) if isinstance(device, int) and not isinstance(device, bool) else device
        self._mapped_root = RootDevice()
        super().__init__(
            device=given, accelerator=accelerator, checkpoint_io=checkpoint_io, precision_plugin=precision_plugin
        )

    @property
    @override
    def root_device(self) -> torch.device:
        """The HPU of this process (``hpu``)."""
        return self._mapped_root.of(self._root_device)

    @override
    def on_exception(self, exception: BaseException) -> None:
        """A failure inside Inductor gets what to do added to its message (``_inductor_hint``)."""
        explain_inductor_failure(exception)
        super().on_exception(exception)

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"hpu_single"`` (the core does this from the plugin spec)."""
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__, override=True)
