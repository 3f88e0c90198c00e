"""The HPU part of Lightning's ``FSDPStrategy``, written once for the Trainer's and Fabric's ``HPUFSDPStrategy``.

As ``lightning.pytorch.strategies.fsdp`` reuses the helpers of ``lightning.fabric.strategies.fsdp``, the two HPU
classes share this mixin and keep only what their trees name differently: the name of the precision attribute
(``precision_plugin`` / ``precision``, made by :func:`hpu_fsdp_precision`), how the process group is joined and where
FSDP's keyword arguments are kept. Neither defines a constructor: each takes its tree's ``FSDPStrategy`` signature
unchanged (what mypy, IDEs and LightningCLI read, and what a new Lightning argument reaches), and the HPU checks hang
on what that constructor sets (``state_dict_type`` here, the backend in :class:`HCCLStrategyMixin`). Lightning-free:
each tree's names are given by the class that uses it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeVar

import torch

from ._devices import parallel_root_device
from ._from_lightning import rebuild_fsdp
from ._fsdp import build_device_mesh, check_state_dict_type, fsdp_device, hpu_precision_plugin, refuse_lazy_mode
from ._hccl_strategy import HCCLStrategyMixin

__all__ = ["FSDPOnHPUs", "hpu_fsdp_precision"]

_Strategy = TypeVar("_Strategy")


class FSDPOnHPUs(HCCLStrategyMixin):
    """Mixin: FSDP over HCCL on HPUs; put it before the Lightning ``FSDPStrategy`` of either tree.

    Example:
        >>> from lightning.pytorch.plugins.precision import FSDPPrecision, Precision
        >>> from lightning.pytorch.strategies import FSDPStrategy
        >>> from lightning_accel.habana._fsdp_strategy import FSDPOnHPUs
        >>> from lightning_accel.habana.fsdp_precision import HPUFSDPPrecision
        >>> class MyStrategy(FSDPOnHPUs, FSDPStrategy):
        ...     _precision_argument = "precision_plugin"
        ...     _plugin_classes = (HPUFSDPPrecision, FSDPPrecision, Precision)
    """

    strategy_name = "hpu_fsdp"
    _precision_argument: ClassVar[str]
    """The tree's name of the precision argument: ``"precision_plugin"`` (Trainer) or ``"precision"`` (Fabric)."""
    _plugin_classes: ClassVar[tuple[type[Any], type[Any], type[Any]]]
    """The tree's ``HPUFSDPPrecision``, Lightning's ``FSDPPrecision`` and Lightning's base ``Precision``."""

    @classmethod
    def from_lightning_strategy(cls: type[_Strategy], strategy: Any) -> _Strategy:
        """This strategy with the arguments of Lightning's ``FSDPStrategy(...)`` instance ``strategy``.

        The core calls it for ``Trainer(accelerator="hpu", strategy=FSDPStrategy(...))`` and Fabric's equivalent,
        so a GPU script's instance runs on HPUs as the name ``"fsdp"`` does.

        Raises:
            ConfigurationError: For a ``process_group_backend`` other than ``"hccl"``, or arguments the HPU strategy
                refuses.
        """
        return rebuild_fsdp(cls, strategy, cls._precision_argument)  # type: ignore[attr-defined]

    @property
    def _state_dict_type(self) -> Literal["full", "sharded"]:
        return self.__dict__["_hpu_state_dict_type"]

    @_state_dict_type.setter
    def _state_dict_type(self, state_dict_type: Literal["full", "sharded"]) -> None:
        # Lightning's constructor stores the argument here and checks it only when a checkpoint is saved; refused
        # here, a bad value fails where the strategy is built.
        check_state_dict_type(state_dict_type)
        self.__dict__["_hpu_state_dict_type"] = state_dict_type

    @property
    def _full(self) -> bool:
        return self._state_dict_type == "full"

    @property
    def root_device(self) -> torch.device:
        """This process's HPU as torch FSDP takes it: with an index (``hpu:0``)."""
        return fsdp_device(parallel_root_device(self.parallel_devices, self.local_rank))  # type: ignore[attr-defined]

    def _hpu_plugin(self, plugin: Any) -> Any:
        """``plugin`` as the tree's ``HPUFSDPPrecision`` (Lightning's FSDP plugin converted), or the error."""
        hpu, lightning_fsdp, base = self._plugin_classes
        tree = "Trainer" if self._precision_argument == "precision_plugin" else "Fabric"
        return hpu_precision_plugin(plugin, hpu, lightning_fsdp, base, f"{tree}(precision=...)")

    def _plugin_or_default(self, plugin: Any) -> Any:
        """The precision plugin set, or a float32 ``HPUFSDPPrecision`` until one is."""
        if plugin is None:
            return self._plugin_classes[0]("32-true")
        assert isinstance(plugin, self._plugin_classes[0])
        return plugin

    def setup_environment(self) -> None:
        """Check the accelerator and the SDK's mode, then join HCCL as Lightning's FSDP joins its process group.

        Raises:
            ConfigurationError: When the accelerator is not the HPU accelerator, or the SDK runs in lazy mode.
        """
        self._check_hpu_accelerator()
        refuse_lazy_mode(type(self).__name__)
        self._start_rank_watch()
        strategy: Any = self
        # Index-less, as on Gaudi: the runtime gives each process its card.
        strategy.accelerator.setup_device(parallel_root_device(self.parallel_devices, strategy.local_rank))
        build_device_mesh(self._join_process_group())

    def _join_process_group(self) -> dict[str, Any]:
        """Join HCCL as the tree's FSDP strategy does; returns its FSDP keyword arguments (for the device mesh)."""
        raise NotImplementedError

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"hpu_fsdp"`` (the core does this from the plugin spec)."""
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__, override=True)


def hpu_fsdp_precision(slot: str) -> Any:
    """The tree's precision property (``precision_plugin`` / ``precision``), kept in Lightning's ``slot``.

    Reads give a float32 ``HPUFSDPPrecision`` until a plugin is set; a set plugin becomes the tree's
    ``HPUFSDPPrecision`` (Lightning's FSDP plugin converted) or the error saying what is accepted.
    """

    def get(self: FSDPOnHPUs) -> Any:
        return self._plugin_or_default(getattr(self, slot))

    def set_(self: FSDPOnHPUs, plugin: Any) -> None:
        setattr(self, slot, None if plugin is None else self._hpu_plugin(plugin))

    return property(get, set_, doc="The precision plugin; a float32 HPUFSDPPrecision until one is set.")
