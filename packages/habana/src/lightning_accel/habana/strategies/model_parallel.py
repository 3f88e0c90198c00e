"""FSDP2 and tensor parallelism over HCCL for the Trainer: Lightning's ``ModelParallelStrategy`` on HPUs."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.pytorch.strategies import ModelParallelStrategy
from typing_extensions import override

from lightning_accel.core.checkpoint_swap import StagedCheckpoints

from .._model_parallel import ModelParallelOnHPUs, sum_gradient_reductions
from .._strategy_defaults import HPUCheckpointIODefault
from ._precision import HPUPrecisionSetter

if TYPE_CHECKING:
    import lightning.pytorch as pl
    import torch
    from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
    from lightning.pytorch.accelerators import Accelerator
    from lightning.pytorch.plugins.precision import Precision

__all__ = ["HPUModelParallelStrategy"]


class HPUModelParallelStrategy(
    StagedCheckpoints, ModelParallelOnHPUs, HPUPrecisionSetter, HPUCheckpointIODefault, ModelParallelStrategy
):
    """FSDP2 and tensor parallelism over HCCL (``strategy="hpu_model_parallel"``): Lightning's model-parallel strategy.

    The LightningModule parallelizes itself in ``configure_model`` with torch's APIs, on the 2-D device mesh
    ``self.device_mesh`` (dimensions ``"data_parallel"`` and ``"tensor_parallel"``) that this strategy builds on the
    HPUs: ``fully_shard`` (FSDP2) over the data-parallel dimension, ``parallelize_module`` with ``ColwiseParallel`` /
    ``RowwiseParallel`` / ``SequenceParallel`` over the tensor-parallel one. Mixed precision is FSDP2's
    ``MixedPrecisionPolicy`` passed to ``fully_shard``, or ``precision="bf16-mixed"`` (autocast on the HPU).
    Checkpoints are distributed (a folder, one file per rank, loadable on another world size) or, with
    ``save_distributed_checkpoint=False``, one full file written by rank 0; both are written aside and swapped in once
    every rank has written (:class:`~lightning_accel.core.checkpoint_swap.StagedCheckpoints`).

    What differs from Lightning's class on GPUs: the ``"hccl"`` process group, joined without an index-less
    ``device_id`` (:class:`~lightning_accel.habana.distributed.HCCLStrategyMixin`); FSDP2 units reduce gradients
    with ``SUM`` and divide, since HCCL has no ``AVG`` (see ``_model_parallel``); ``reduce`` takes host tensors and
    maps ``"mean"`` onto a sum; eager mode only (``PT_HPU_LAZY_MODE=0``), as for FSDP on Gaudi.

    Args:
        data_parallel_size: Size of the mesh's ``"data_parallel"`` dimension; ``"auto"`` is the number of nodes.
        tensor_parallel_size: Size of its ``"tensor_parallel"`` dimension; ``"auto"`` is the HPUs per node.
        save_distributed_checkpoint: ``True``: each rank saves its shards into a folder; ``False``: rank 0 saves
            the gathered state in one file.
        process_group_backend: The ``torch.distributed`` backend; ``"hccl"``.
        timeout: Timeout of collective operations.
        accelerator: The accelerator (normally set by the Trainer).
        parallel_devices: The HPUs of this node; the Trainer's ``devices`` by default.
        cluster_environment: How processes find each other (Lightning picks one by default).
        checkpoint_io: Checkpoint I/O of full checkpoints; :class:`~lightning_accel.habana.HPUCheckpointIO` by
            default.
        precision_plugin: Lightning's plugin for ``precision=`` becomes an
            :class:`~lightning_accel.habana.HPUPrecisionPlugin`.

    Raises:
        ConfigurationError: When the accelerator is not the HPU accelerator, for ``precision="fp8"`` (see
            ``_model_parallel``), or when the SDK runs in lazy mode.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUModelParallelStrategy
        >>> strategy = HPUModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2)
        >>> trainer = Trainer(accelerator="hpu", devices=4, strategy=strategy)  # doctest: +SKIP
    """

    _precision_argument = "precision_plugin"

    def __init__(
        self,
        data_parallel_size: Literal["auto"] | int = "auto",
        tensor_parallel_size: Literal["auto"] | int = "auto",
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = "hccl",
        timeout: timedelta | None = default_pg_timeout,
        *,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
    ) -> None:
        super().__init__(
            data_parallel_size=data_parallel_size,
            tensor_parallel_size=tensor_parallel_size,
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )
        self._carry_over(accelerator, parallel_devices, cluster_environment, precision_plugin)
        self._checkpoint_io = checkpoint_io

    @override
    def _setup_distributed(self) -> None:
        # Lightning's joins with device_id=root_device, which the index-less HPU cannot be: the mixin's way instead.
        self.setup_distributed()

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        """Set up as Lightning's strategy does, after ``configure_model``'s FSDP2 units are set to reduce by sum."""
        assert self.model is not None
        sum_gradient_reductions(self.model)
        super().setup(trainer)
