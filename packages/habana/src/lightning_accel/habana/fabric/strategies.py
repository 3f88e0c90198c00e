"""Fabric strategies for HPUs: one device, or data parallel over HCCL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.strategies import DDPStrategy, SingleDeviceStrategy
from typing_extensions import override

from .._accelerator_check import RequiresHPUAccelerator
from .._compile_default_backend import FabricCompilesWithHPUBackend
from .._devices import RootDevice
from .._from_lightning import lightning_ddp_arguments
from .._hccl_strategy import HCCLStrategyMixin
from .._lazy import MarkStepAfterUpdates
from .._strategy_defaults import HPUCheckpointIODefault
from .precision import HPUPrecision

if TYPE_CHECKING:
    from lightning.fabric.accelerators import Accelerator
    from lightning.fabric.plugins import CheckpointIO, Precision

__all__ = ["HPUParallelStrategy", "SingleHPUStrategy"]


class _HPUPrecisionSetter:
    """Mixin: Fabric's generic precision plugins (built from ``precision=``) become :class:`HPUPrecision`."""

    _precision: Precision | None

    @property
    def precision(self) -> Precision:
        """The precision plugin; float32 :class:`HPUPrecision` until one is set."""
        if self._precision is None:
            self._precision = HPUPrecision()
        return self._precision

    @precision.setter
    def precision(self, precision: Precision | None) -> None:
        self._precision = None if precision is None else HPUPrecision.from_lightning(precision)


class SingleHPUStrategy(
    FabricCompilesWithHPUBackend,
    RequiresHPUAccelerator,
    _HPUPrecisionSetter,
    HPUCheckpointIODefault,
    MarkStepAfterUpdates,
    SingleDeviceStrategy,
):
    """Fabric strategy for one HPU (``strategy="hpu_single"``); closes the lazy graph after backward and step.

    Example:
        >>> from lightning.fabric import Fabric
        >>> from lightning_accel.habana.fabric import HPUAccelerator, SingleHPUStrategy
        >>> fabric = Fabric(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy())  # doctest: +SKIP
    """

    strategy_name = "hpu_single"

    def __init__(
        self,
        device: torch.device | str | int = "hpu",
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision: Precision | None = None,
    ) -> None:
        given = torch.device("hpu", device) if isinstance(device, int) and not isinstance(device, bool) else device
        self._mapped_root = RootDevice()
        super().__init__(device=given, accelerator=accelerator, checkpoint_io=checkpoint_io, precision=precision)

    @property
    @override
    def root_device(self) -> torch.device:
        """The HPU of this process (``hpu``)."""
        return self._mapped_root.of(self._root_device)

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"hpu_single"`` (the core does this from the plugin spec)."""
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__, override=True)


class HPUParallelStrategy(
    FabricCompilesWithHPUBackend,
    HCCLStrategyMixin,
    _HPUPrecisionSetter,
    HPUCheckpointIODefault,
    MarkStepAfterUpdates,
    DDPStrategy,
):
    """Fabric data parallel over HCCL (``strategy="hpu_parallel"``, also ``"hpu_ddp"``).

    ``fabric.all_reduce`` supports sum, mean, min and max.

    Example:
        >>> import torch
        >>> from lightning.fabric import Fabric
        >>> from lightning_accel.habana.fabric import HPUAccelerator, HPUParallelStrategy
        >>> strategy = HPUParallelStrategy(parallel_devices=[torch.device("hpu")] * 2)
        >>> fabric = Fabric(accelerator=HPUAccelerator(), strategy=strategy, devices=2)  # doctest: +SKIP
    """

    strategy_name = "hpu_parallel"

    @classmethod
    def from_lightning_strategy(cls, strategy: DDPStrategy) -> HPUParallelStrategy:
        """This strategy with the arguments of Fabric's ``DDPStrategy(...)`` instance ``strategy``.

        The core calls it for ``Fabric(accelerator="hpu", strategy=DDPStrategy(...))``.

        Raises:
            ConfigurationError: For a ``process_group_backend`` other than ``"hccl"``.
        """
        return cls(**lightning_ddp_arguments(strategy, "precision"))

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"hpu_parallel"`` and ``"hpu_ddp"`` (the core does this from the plugin spec)."""
        for name in (cls.strategy_name, "hpu_ddp"):
            strategy_registry.register(name, cls, description=cls.__name__, override=True)
