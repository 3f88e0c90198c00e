"""All-reduce with the operations HCCL supports (it has no average: the mean is a sum divided by the world size).

Kept so that ``from lightning_accel.deepspeed_hpu.collectives import all_reduce`` still works; the implementation is
lightning-accel-habana's :func:`lightning_accel.habana.distributed.all_reduce`, shared by every HPU strategy.
"""

from lightning_accel.habana.distributed import all_reduce

__all__ = ["all_reduce"]
