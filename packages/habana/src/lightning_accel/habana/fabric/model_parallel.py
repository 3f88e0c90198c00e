"""FSDP2 and tensor parallelism over HCCL for Fabric: Lightning's ``ModelParallelStrategy`` on HPUs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.strategies import ModelParallelStrategy
from typing_extensions import override

from lightning_accel.core.checkpoint_swap import StagedFabricCheckpoints
from lightning_accel.core.errors import ConfigurationError

from .._model_parallel import ModelParallelOnHPUs, sum_gradient_reductions
from .strategies import _HPUPrecisionSetter

if TYPE_CHECKING:
    import torch
    from lightning.fabric.accelerators import Accelerator
    from lightning.fabric.plugins import ClusterEnvironment, Precision
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["HPUModelParallelStrategy"]


class HPUModelParallelStrategy(
    StagedFabricCheckpoints, ModelParallelOnHPUs, _HPUPrecisionSetter, ModelParallelStrategy
):
    """Fabric's FSDP2 and tensor parallelism over HCCL (``strategy="hpu_model_parallel"``).

    ``parallelize_fn(module, device_mesh)`` applies ``fully_shard`` and ``parallelize_module`` on the 2-D mesh this
    strategy builds on the HPUs (dimensions ``"data_parallel"`` and ``"tensor_parallel"``), as with Lightning's
    class. The HPU differences are those of the Trainer's
    :class:`~lightning_accel.habana.HPUModelParallelStrategy`: HCCL, FSDP2 gradients reduced by ``SUM`` (HCCL has
    no ``AVG``), ``fabric.all_reduce`` of host tensors with sum, mean, min and max, eager mode only. ``fabric.save``
    writes aside and swaps the checkpoint in once every rank has written
    (:class:`~lightning_accel.core.checkpoint_swap.StagedFabricCheckpoints`).

    Raises:
        ConfigurationError: Without ``parallelize_fn`` (so the name alone is refused, as Lightning's class needs it),
            when the accelerator is not the HPU accelerator, for ``precision="fp8"`` (see ``_model_parallel``), or
            when the SDK runs in lazy mode.

    Example:
        >>> from lightning.fabric import Fabric
        >>> from lightning_accel.habana.fabric import HPUModelParallelStrategy
        >>> def parallelize(model, mesh):
        ...     return model  # fully_shard / parallelize_module on mesh["data_parallel"], mesh["tensor_parallel"]
        >>> strategy = HPUModelParallelStrategy(parallelize, data_parallel_size=1, tensor_parallel_size=2)
        >>> fabric = Fabric(accelerator="hpu", devices=2, strategy=strategy)  # doctest: +SKIP
    """

    _precision_argument = "precision"

    def __init__(
        self,
        parallelize_fn: Callable[[Any, DeviceMesh], Any] | None = None,
        data_parallel_size: Literal["auto"] | int = "auto",
        tensor_parallel_size: Literal["auto"] | int = "auto",
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = "hccl",
        timeout: timedelta | None = default_pg_timeout,
        *,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        precision: Precision | None = None,
    ) -> None:
        if parallelize_fn is None:
            raise ConfigurationError(
                f"{type(self).__name__} needs parallelize_fn, the function that applies fully_shard and "
                "parallelize_module to your model on the device mesh: pass strategy=HPUModelParallelStrategy("
                "parallelize_fn) (lightning_accel.habana.fabric) or Lightning's ModelParallelStrategy(parallelize_fn); "
                "the name 'hpu_model_parallel' alone cannot say how to parallelize the model."
            )
        super().__init__(
            parallelize_fn=parallelize_fn,
            data_parallel_size=data_parallel_size,
            tensor_parallel_size=tensor_parallel_size,
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )
        self._carry_over(accelerator, parallel_devices, cluster_environment, precision)

    @override
    def _setup_distributed(self) -> None:
        # Lightning's joins with device_id=root_device, which the index-less HPU cannot be: the mixin's way instead.
        from lightning.fabric.utilities.seed import reset_seed

        reset_seed()
        super()._setup_distributed()

    @override
    def setup_module(self, module: Any) -> Any:
        """Parallelize as Lightning's strategy does; then the FSDP2 units reduce gradients by sum."""
        module = super().setup_module(module)
        sum_gradient_reductions(module)
        return module
