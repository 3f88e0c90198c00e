"""How many replicas each stage runs: the user's ``poptorch.Options`` for that stage, else ``Trainer(devices=...)``.

poptorch compiles the training model and each inference model separately, each with its own options
(``_poplar_executor.py``), so training on 8 replicas and validating on 1 is something IPUs do. The rules:

* A stage whose options set a replication factor runs on that many replicas (``training_opts`` for training,
  ``inference_opts`` for validation, test and predict), whatever ``devices`` says; when ``devices`` was given and
  differs, the strategy says so once.
* Every other stage runs on ``devices`` replicas. When ``devices`` is not given, Lightning asks the accelerator for its
  automatic count; that count is marked (:class:`AutoDeviceCount`, :class:`AutoDevices`) so that the strategy can
  take the largest factor the options set instead of every IPU.
* Each stage's loader is sized for its own replicas (its batch holds ``batch_size x device_iterations x replicas x
  accumulation`` samples).
* The hardware's limit is the only refusal: a stage cannot run more replicas than IPUs can be reserved.

poptorch's ``Options`` do not record whether ``replicationFactor`` was called, so a factor of 1 (poptorch's
default, ``options.py`` ``Options.__init__`` in poptorch 3.4) reads as "not set": a stage on one replica next to a
stage on more is written ``Trainer(devices=1)`` with the other stage's options setting its factor.
"""

from __future__ import annotations

from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

__all__ = [
    "AutoDeviceCount",
    "AutoDevices",
    "check_reservable",
    "replication_from_options",
    "trim_automatic_devices",
]


class AutoDeviceCount(int):
    """An IPU count chosen by Lightning for ``devices="auto"`` (the user gave none)."""


class AutoDevices(list):
    """The devices Lightning chose for ``devices="auto"``; the strategy may use fewer (the options' replicas)."""


def replication_from_options(training_opts: Any, inference_opts: Any) -> dict[bool, int | None]:
    """Each stage's replication factor as the user's options set it (key ``True``: training), ``None`` where unset."""
    return {
        training: None if opts is None or int(opts.replication_factor) == 1 else int(opts.replication_factor)
        for training, opts in ((True, training_opts), (False, inference_opts))
    }


def check_reservable(replicas: int, available: int, argument: str) -> None:
    """Refuse a stage's replication factor that needs more IPUs than this process can reserve.

    Raises:
        ConfigurationError: When ``replicas`` is over ``available``.
    """
    if replicas > available:
        raise ConfigurationError(
            f"The poptorch options ask for {argument}.replicationFactor({replicas}), but only {available} IPU(s) can "
            f"be reserved in this process. Lower the replication factor, or run on a system with {replicas} IPUs "
            "(under emulation, raise LIGHTNING_ACCEL_EMULATED_DEVICES)."
        )


def trim_automatic_devices(devices: list[torch.device], replicas: int, argument: str) -> list[torch.device]:
    """The first ``replicas`` of the devices Lightning chose automatically.

    Raises:
        ConfigurationError: When the options ask for more replicas than Lightning found IPUs.
    """
    check_reservable(replicas, len(devices), argument)
    return list(devices[:replicas])
