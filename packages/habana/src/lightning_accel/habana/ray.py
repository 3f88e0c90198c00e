"""Lightning on Gaudi under Ray Train: the HCCL data-parallel strategy, driven by Ray's workers.

Ray's own :class:`ray.train.lightning.RayDDPStrategy` cannot drive an HPU: its root device is Ray's
``get_device()`` (``torch.device("hpu")``, without an index, ``ray/air/_internal/device_manager/hpu.py``), so
Lightning's DDP passes ``device_ids=[None]`` and opens a ``torch.cuda.Stream`` (``lightning/pytorch/strategies/ddp.py``,
``_setup_model``), which fails without CUDA; it also maps ``precision="bf16-mixed"`` to CUDA autocast and never marks
a step in lazy mode. :class:`RayHPUStrategy` is :class:`~lightning_accel.habana.HPUParallelStrategy` (HCCL, the HPU
precision plugin, lazy-mode steps, checkpoint I/O) and also a ``RayDDPStrategy``, so that
``ray.train.lightning.prepare_trainer`` accepts it.

What differs from a run that Lightning or torchrun launches:

- **Processes and the process group are Ray's.** ``TorchTrainer(..., torch_config=TorchConfig(backend="hccl"))``
  starts one worker per HPU, sets ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` and joins the ``"hccl"`` group before the
  training function runs (``ray/train/torch/config.py``: ``_TorchBackend.on_start``,
  ``_setup_torch_process_group``, which imports ``habana_frameworks.torch.distributed.hccl`` for ``"hccl"``). The
  strategy joins nothing; it checks that the group is ``"hccl"``.
- **Each worker sees its own card.** Ray gives a worker the cards it reserved through ``HABANA_VISIBLE_MODULES``
  (``ray/_private/accelerators/hpu.py``), so the worker sees one HPU and the SDK acquires that card by type. The
  strategy does not call the SDK's ``initialize_distributed_hpu`` with Ray's local rank: the SDK maps local rank ``r``
  to the ``r``-th visible module and asserts that there are that many (``habana_frameworks/torch/distributed/hccl/
  __init__.py``, ``_setup_module_id``, gaudi-pytorch-bridge 1.19.0), which fails on every worker but the first
  when each sees one card.
- **The root device** is the HPU Ray reports for the worker; a worker that Ray gave no HPU is an error that says how
  to ask for one.

Importing this module imports Ray (the ``lightning-accel-habana[ray]`` extra); nothing else in the package does.

Example:
    >>> from lightning.pytorch import Trainer
    >>> from ray.train.lightning import RayLightningEnvironment, RayTrainReportCallback, prepare_trainer
    >>> from lightning_accel.habana.ray import RayHPUStrategy
    >>> def train_func(config):  # runs on each Ray worker
    ...     trainer = Trainer(
    ...         accelerator="hpu",
    ...         devices="auto",
    ...         strategy=RayHPUStrategy(),
    ...         plugins=[RayLightningEnvironment()],
    ...         callbacks=[RayTrainReportCallback()],
    ...     )
    ...     trainer = prepare_trainer(trainer)
    ...     trainer.fit(...)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from ray.train.lightning import RayDDPStrategy
from ray.train.torch import get_device
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from . import sdk
from .strategies import HPUParallelStrategy

__all__ = ["RayHPUStrategy", "RayHPUWorker", "ray_worker_hpu"]


def ray_worker_hpu() -> torch.device:
    """The HPU Ray gave this worker (``ray.train.torch.get_device()``), checked to be an HPU.

    Raises:
        ConfigurationError: When Ray gave the worker no HPU, or more than one (one process drives one Gaudi card).
    """
    device = get_device()
    if device.type != sdk.DEVICE_TYPE:
        raise ConfigurationError(
            f"This Ray worker was given no HPU: ray.train.torch.get_device() is {device}. Accepted: one HPU per "
            'worker. Reserve it with ScalingConfig(num_workers=N, resources_per_worker={"HPU": 1}); Ray counts the '
            "HPUs of each node when it starts (with the emulator, set LIGHTNING_ACCEL_EMULATE=hpu before ray.init)."
        )
    visible = sdk.hpu_module().device_count()
    if visible != 1:
        modules = os.environ.get("HABANA_VISIBLE_MODULES")
        raise ConfigurationError(
            f"This Ray worker sees {visible} HPUs (HABANA_VISIBLE_MODULES={modules!r}), but a Gaudi process drives "
            'one card. Accepted: resources_per_worker={"HPU": 1}, without '
            "RAY_EXPERIMENTAL_NOSET_HABANA_VISIBLE_MODULES, so that Ray hands each worker its own card."
        )
    return device


class RayHPUWorker:
    """Mixin for an HCCL strategy whose processes and process group Ray Train made (put it first).

    Example:
        >>> from lightning_accel.habana import HPUParallelStrategy
        >>> from ray.train.lightning import RayDDPStrategy
        >>> class MyRayHPUStrategy(RayHPUWorker, HPUParallelStrategy, RayDDPStrategy):
        ...     pass
    """

    cluster_environment: Any  # provided by the Lightning strategy the mixin is combined with

    @property
    def root_device(self) -> torch.device:
        """The HPU Ray gave this worker (see :func:`ray_worker_hpu`), checked once."""
        device: torch.device | None = self.__dict__.get("_ray_worker_hpu")
        if device is None:
            device = self.__dict__["_ray_worker_hpu"] = ray_worker_hpu()
        return device

    def _check_ray_process_group(self) -> str:
        if not dist.is_initialized():
            raise ConfigurationError(
                f"{type(self).__name__} runs inside a Ray Train worker, whose process group Ray creates, but there is "
                "none. Accepted: the strategy built in the training function of "
                'TorchTrainer(train_func, ..., torch_config=TorchConfig(backend="hccl")).'
            )
        backend = str(dist.get_backend())
        if backend != sdk.distributed_backend():
            raise ConfigurationError(
                f"Ray joined the workers over backend={backend!r}, but HPUs communicate over "
                f"{sdk.distributed_backend()!r}. Pass torch_config=TorchConfig(backend={sdk.distributed_backend()!r}) "
                "to the TorchTrainer."
            )
        return backend

    def _start_rank_watch(self) -> None:
        # Ray watches its workers (and restarts them under FailureConfig): there is no launcher of ours to watch.
        return None


class RayHPUStrategy(RayHPUWorker, HPUParallelStrategy, RayDDPStrategy):
    """Data-parallel training over HCCL on the HPUs of Ray Train's workers, one HPU per worker.

    Build it inside the training function of a ``TorchTrainer`` with ``TorchConfig(backend="hccl")`` and
    ``resources_per_worker={"HPU": 1}``, next to Ray's ``RayLightningEnvironment`` plugin; ``prepare_trainer``
    accepts it (it is a ``RayDDPStrategy``). Arguments are :class:`~lightning_accel.habana.HPUParallelStrategy`'s,
    except the process group's (``process_group_backend``, ``timeout``): Ray's ``TorchConfig`` sets those.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from ray.train.lightning import RayLightningEnvironment
        >>> trainer = Trainer(  # doctest: +SKIP
        ...     accelerator="hpu", devices="auto", strategy=RayHPUStrategy(), plugins=[RayLightningEnvironment()]
        ... )
    """

    strategy_name = "hpu_ray"

    @override
    def setup_distributed(self) -> None:
        """Take the ``"hccl"`` process group Ray made, and this worker's ranks from Ray's environment.

        Raises:
            ConfigurationError: When there is no process group, or it is not ``"hccl"``.
        """
        from lightning.fabric.utilities.seed import reset_seed

        reset_seed()
        self.set_world_ranks()
        self._process_group_backend = self._check_ray_process_group()

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Registered under no name: the strategy is built in a Ray worker's training function, by its class."""
        return None
