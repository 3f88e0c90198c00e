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
"""

from __future__ import annotations

import torch

from lightning_accel.core.errors import ConfigurationError

__all__ = ["refuse_fp8", "sum_gradient_reductions"]


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
