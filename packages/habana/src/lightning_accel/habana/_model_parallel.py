"""The HPU part of FSDP2 and tensor parallelism (Lightning's ``ModelParallelStrategy``), once for both trees.

Lightning's ``ModelParallelStrategy`` (Trainer and Fabric) runs on HPUs nearly as it is: the device mesh is built on
the root device's type (``"hpu"``), ``fully_shard`` and ``parallelize_module`` place their DTensors on the mesh's
device, and distributed checkpoints go through ``torch.distributed.checkpoint``. What differs on Gaudi lives here:

- **Gradient reduction.** HCCL reduces with ``MIN``, ``MAX``, ``SUM`` and ``PRODUCT`` only (gaudi-pytorch-bridge
  ``backend/helpers/collective_utils.cpp``), and FSDP2 reduce-scatters float32 and bfloat16 gradients with
  ``ReduceOp.AVG`` (torch ``_fully_shard/_fsdp_collectives.py``, ``_get_gradient_divide_factors``), which HCCL
  refuses. Every ``fully_shard`` unit is switched to ``set_force_sum_reduction_for_comms(True)``: a ``SUM`` followed
  by the division FSDP2 does itself, the same gradients.
- **No fp8.** The SDK's Transformer Engine shards its fp8 layers its own way, Megatron style
  (``te.Linear(tp_group=..., parallel_mode=...)``, ``hpex/experimental/transformer_engine/module/linear.py``), on
  plain tensors; torch's DTensor parallelism (``fully_shard``, ``parallelize_module``) is not a layout it takes, so
  ``precision="fp8"`` is refused before the ranks start (:func:`refuse_fp8`).
- **Eager mode only**, as for FSDP1 (:func:`~lightning_accel.habana._fsdp.refuse_lazy_mode`).
- Joining HCCL, reductions of host tensors, the launcher and teardown come from
  :class:`~lightning_accel.habana.distributed.HCCLStrategyMixin`.

:class:`ModelParallelOnHPUs` holds all of it for the Trainer's and Fabric's ``HPUModelParallelStrategy``, which add
only where their trees differ (the hook after parallelization, the precision argument's name).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import torch

from lightning_accel.core.errors import ConfigurationError

from ._from_lightning import lightning_model_parallel_arguments
from ._fsdp import refuse_lazy_mode
from ._hccl_strategy import HCCLStrategyMixin

__all__ = ["ModelParallelOnHPUs", "refuse_fp8", "sum_gradient_reductions"]

_Strategy = TypeVar("_Strategy", bound="ModelParallelOnHPUs")


def sum_gradient_reductions(module: torch.nn.Module) -> int:
    """Make every ``fully_shard`` unit in ``module`` reduce its gradients with ``SUM`` (HCCL has no ``AVG``).

    Returns:
        How many FSDP2 units were switched (0 for a model with tensor parallelism only).
    """
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in module.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.set_force_sum_reduction_for_comms(True)
    return len(units)


def refuse_fp8(precision: str, strategy: str) -> None:
    """Refuse fp8 training under FSDP2 and tensor parallelism (see the module docstring for why).

    Raises:
        ConfigurationError: For ``precision="fp8"``.
    """
    if precision != "fp8":
        return
    raise ConfigurationError(
        f"{strategy} does not train in precision='fp8': the SDK's Transformer Engine (Gaudi's fp8 training) splits its "
        "layers its own way (te.Linear(tp_group=..., parallel_mode=...)) on plain tensors, not as the DTensors that "
        "fully_shard and parallelize_module make. Accepted: precision='bf16-mixed', 'bf16-true' or '32-true' (FSDP2's "
        "MixedPrecisionPolicy in configure_model for bfloat16 compute); for fp8 use HPUPrecisionPlugin('fp8') with "
        "strategy='hpu_parallel' (data parallel) or HPUDeepSpeedStrategy."
    )


class ModelParallelOnHPUs(HCCLStrategyMixin):
    """Mixin: the HPU part of Lightning's ``ModelParallelStrategy``; put it before the Lightning class of either tree.

    Example:
        >>> from lightning.pytorch.strategies import ModelParallelStrategy
        >>> from lightning_accel.habana._model_parallel import ModelParallelOnHPUs
        >>> class MyStrategy(ModelParallelOnHPUs, ModelParallelStrategy):
        ...     _precision_argument = "precision_plugin"
    """

    strategy_name = "hpu_model_parallel"
    _precision_argument: ClassVar[str]
    """The tree's name of the precision argument: ``"precision_plugin"`` (Trainer) or ``"precision"`` (Fabric)."""

    def _carry_over(self, accelerator: Any, parallel_devices: Any, cluster_environment: Any, precision: Any) -> None:
        # Lightning's classes take these from the Trainer or Fabric only; a rebuilt instance carries them over.
        strategy: Any = self
        strategy._accelerator = accelerator
        strategy.parallel_devices = parallel_devices
        strategy.cluster_environment = cluster_environment
        setattr(strategy, self._precision_argument, precision)

    @classmethod
    def from_lightning_strategy(cls: type[_Strategy], strategy: Any) -> _Strategy:
        """This strategy with the arguments of Lightning's ``ModelParallelStrategy(...)`` instance ``strategy``.

        The core calls it for ``Trainer(accelerator="hpu", strategy=ModelParallelStrategy(...))`` and Fabric's
        equivalent, so a GPU script's instance runs on HPUs.

        Raises:
            ConfigurationError: For a ``process_group_backend`` other than ``"hccl"``.
        """
        return cls(**lightning_model_parallel_arguments(strategy, cls._precision_argument))

    def _configure_launcher(self) -> None:
        # Before the ranks start, as the accelerator check.
        plugin = getattr(self, self._precision_argument)
        refuse_fp8(getattr(plugin, "precision", ""), type(self).__name__)
        super()._configure_launcher()

    def setup_environment(self) -> None:
        """Refuse lazy mode, then join HCCL and build the device mesh on the HPUs as Lightning's strategy does.

        Raises:
            ConfigurationError: When the SDK runs in lazy mode.
        """
        refuse_lazy_mode(type(self).__name__)
        super().setup_environment()

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"hpu_model_parallel"`` (the core does this from the plugin spec)."""
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__, override=True)
