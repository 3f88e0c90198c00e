"""Building blocks of the HPU data-parallel strategies, for other strategies that run on HPUs.

The Trainer and Fabric HPU strategies are made of these; a strategy built on another Lightning strategy (such as
lightning-accel-deepspeed-hpu's ``HPUDeepSpeedStrategy``) reuses them instead of copying them:

- :class:`HCCLStrategyMixin`: everything HPU-specific of a data-parallel strategy (accelerator check, root device,
  joining the ``"hccl"`` process group without an index-less ``device_id``, reductions, teardown), written once for
  the Trainer, Fabric and DeepSpeed strategies;
- :class:`HCCLEnvironment`: join HCCL as an HPU process, and undo what that writes to the environment on teardown;
- :func:`all_reduce` / :func:`resolve_reduce_op`: all-reduce with the operations HCCL supports (it has no average,
  so the mean is a sum divided by the world size);
- :func:`parallel_root_device`: this process's HPU among ``parallel_devices`` (``hpu``, without an index);
- :class:`MarkStepAfterUpdates` / :class:`MarkStepAroundEvaluation` / :func:`mark_step`: lazy-mode graph boundaries.

The module imports neither Lightning nor the Habana SDK (the SDK, or its emulator, is resolved on first use), so the
mixins fit strategies of ``lightning.pytorch``, ``lightning.fabric`` and their ``pytorch_lightning`` twins alike.

Example:
    >>> from lightning.pytorch.strategies import DDPStrategy
    >>> from lightning_accel.habana.distributed import MarkStepAfterUpdates, MarkStepAroundEvaluation, all_reduce
    >>> class MyHPUStrategy(MarkStepAfterUpdates, MarkStepAroundEvaluation, DDPStrategy):
    ...     def reduce(self, tensor, group=None, reduce_op="mean"):
    ...         return all_reduce(tensor, group=group, reduce_op=reduce_op)
"""

from ._collectives import all_reduce, resolve_reduce_op
from ._devices import parallel_root_device
from ._distributed_env import HCCLEnvironment
from ._hccl_strategy import HCCLStrategyMixin
from ._lazy import MarkStepAfterUpdates, MarkStepAroundEvaluation, mark_step

__all__ = [
    "HCCLEnvironment",
    "HCCLStrategyMixin",
    "MarkStepAfterUpdates",
    "MarkStepAroundEvaluation",
    "all_reduce",
    "mark_step",
    "parallel_root_device",
    "resolve_reduce_op",
]
