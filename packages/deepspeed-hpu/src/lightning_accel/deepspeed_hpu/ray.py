"""DeepSpeed ZeRO on Gaudi under Ray Train: :class:`RayHPUDeepSpeedStrategy`.

Ray's ``RayDeepSpeedStrategy`` (``ray/train/lightning/_lightning_utils.py``) is Lightning's CUDA DeepSpeed strategy
with Ray's root device; it refuses an HPU accelerator as Lightning's does. This strategy is
:class:`~lightning_accel.deepspeed_hpu.HPUDeepSpeedStrategy` (DeepSpeed's HPU accelerator, HCCL, ZeRO stages,
offload) and a ``RayDeepSpeedStrategy`` (``prepare_trainer`` accepts it), with the worker handling of
:class:`lightning_accel.habana.ray.RayHPUWorker`: Ray's ``"hccl"`` process group, which DeepSpeed adopts, and the
one HPU Ray gave the worker.

Importing this module imports Ray (``pip install "lightning-accel-habana[ray]" lightning-accel-deepspeed-hpu``).

Example:
    >>> from lightning.pytorch import Trainer
    >>> from ray.train.lightning import RayLightningEnvironment, RayTrainReportCallback
    >>> from lightning_accel.deepspeed_hpu.ray import RayHPUDeepSpeedStrategy
    >>> trainer = Trainer(  # doctest: +SKIP
    ...     accelerator="hpu",
    ...     devices="auto",
    ...     strategy=RayHPUDeepSpeedStrategy(stage=2),
    ...     plugins=[RayLightningEnvironment()],
    ...     callbacks=[RayTrainReportCallback()],
    ... )
"""

from __future__ import annotations

from typing import Any

from ._runtime import prepare_deepspeed_import

# Before anything imports deepspeed (Ray's module below imports Lightning's DeepSpeed strategy).
prepare_deepspeed_import()

from lightning.fabric.utilities.seed import reset_seed  # noqa: E402
from ray.train.lightning import RayDeepSpeedStrategy  # noqa: E402
from typing_extensions import override  # noqa: E402

from lightning_accel.habana.ray import RayHPUWorker  # noqa: E402

from ._runtime import check_deepspeed_accelerator  # noqa: E402
from .strategy import HPUDeepSpeedStrategy  # noqa: E402

__all__ = ["RayHPUDeepSpeedStrategy"]


class RayHPUDeepSpeedStrategy(RayHPUWorker, HPUDeepSpeedStrategy, RayDeepSpeedStrategy):
    """DeepSpeed (ZeRO stages 1 to 3, offload) on the HPUs of Ray Train's workers, one HPU per worker.

    Arguments are :class:`~lightning_accel.deepspeed_hpu.HPUDeepSpeedStrategy`'s. Build it in the training function
    of a ``TorchTrainer`` with ``TorchConfig(backend="hccl")`` and ``resources_per_worker={"HPU": 1}``.

    Example:
        >>> strategy = RayHPUDeepSpeedStrategy(stage=3)  # doctest: +SKIP
    """

    @override
    def setup_distributed(self) -> None:
        """Adopt Ray's ``"hccl"`` process group in DeepSpeed (which joins none when one exists).

        Raises:
            ConfigurationError: When there is no process group, it is not ``"hccl"``, or DeepSpeed runs another
                accelerator than the HPU's.
        """
        reset_seed()
        self.set_world_ranks()
        self._check_ray_process_group()
        check_deepspeed_accelerator()
        self._init_deepspeed_distributed()

    @override
    def _deepspeed_device_rank(self) -> int:
        # Ray's worker sees one HPU (its card, through HABANA_VISIBLE_MODULES): index 0, whatever its local rank.
        return 0

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Registered under no name: the strategy is built in a Ray worker's training function, by its class."""
        return None
