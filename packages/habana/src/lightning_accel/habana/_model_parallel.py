"""The HPU part of FSDP2 and tensor parallelism (Lightning's ``ModelParallelStrategy``), once for both trees.

Lightning's ``ModelParallelStrategy`` (Trainer and Fabric) runs on HPUs nearly as it is: the device mesh is built on
the root device's type (``"hpu"``), ``fully_shard`` and ``parallelize_module`` place their DTensors on the mesh's
device, and distributed checkpoints go through ``torch.distributed.checkpoint``. What differs on Gaudi lives here:

- **Gradient reduction.** HCCL reduces with ``MIN``, ``MAX``, ``SUM`` and ``PRODUCT`` only (gaudi-pytorch-bridge
  ``backend/helpers/collective_utils.cpp``), and FSDP2 reduce-scatters float32 and bfloat16 gradients with
  ``ReduceOp.AVG`` (torch ``_fully_shard/_fsdp_collectives.py``, ``_get_gradient_divide_factors``), which HCCL
  refuses. Every ``fully_shard`` unit is switched to ``set_force_sum_reduction_for_comms(True)``: a ``SUM`` followed
  by the division FSDP2 does itself, the same gradients.
- **Eager mode only**, as for FSDP1 (:func:`~lightning_accel.habana._fsdp.refuse_lazy_mode`).
- Joining HCCL, reductions of host tensors, the launcher and teardown come from
  :class:`~lightning_accel.habana.distributed.HCCLStrategyMixin`.
"""

from __future__ import annotations

import torch

__all__ = ["sum_gradient_reductions"]


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
