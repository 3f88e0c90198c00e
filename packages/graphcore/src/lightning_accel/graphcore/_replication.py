"""Where the number of replicas comes from: ``Trainer(devices=...)`` or the user's ``poptorch.Options``.

Rules (each contradiction is an error, nothing is overridden silently):

* ``devices`` given: it is the replication factor. Options that set another one contradict it (the strategy's
  option resolution raises).
* ``devices`` not given: Lightning asks the accelerator for its automatic count; that count is marked
  (:class:`AutoDeviceCount`, :class:`AutoDevices`) so that the strategy can let the user's options decide.
* ``training_opts`` and ``inference_opts`` that both set a replication factor, and set different ones, contradict
  each other.

poptorch's ``Options`` do not record whether ``replicationFactor`` was called, so a factor of 1 (poptorch's
default, ``options.py`` ``Options.__init__`` in poptorch 3.4) reads as "not set" unless the other options set
another factor.
"""

from __future__ import annotations

from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

__all__ = ["AutoDeviceCount", "AutoDevices", "replication_from_options", "trim_automatic_devices"]


class AutoDeviceCount(int):
    """An IPU count chosen by Lightning for ``devices="auto"`` (the user gave none)."""


class AutoDevices(list):
    """The devices Lightning chose for ``devices="auto"``; the strategy may use fewer (the options' replicas)."""


def replication_from_options(training_opts: Any, inference_opts: Any) -> int | None:
    """The replication factor the user's options set, or ``None`` when they leave it at poptorch's default.

    Raises:
        ConfigurationError: When both options are given and their replication factors differ.
    """
    given = {
        name: int(opts.replication_factor)
        for name, opts in (("training_opts", training_opts), ("inference_opts", inference_opts))
        if opts is not None
    }
    if len(given) == 2 and len(set(given.values())) == 2 and max(given.values()) > 1:
        training, inference = given["training_opts"], given["inference_opts"]
        raise ConfigurationError(
            f"IPUStrategy(training_opts=... .replicationFactor({training}), inference_opts=... "
            f".replicationFactor({inference})): the two options contradict each other. Every stage runs on the same "
            "number of replicas (Trainer(devices=N)); set the same replicationFactor on both options, or leave it "
            "out of both and pass Trainer(devices=N)."
        )
    explicit = [factor for factor in given.values() if factor != 1]
    return explicit[0] if explicit else None


def trim_automatic_devices(devices: list[torch.device], replicas: int) -> list[torch.device]:
    """The first ``replicas`` of the devices Lightning chose automatically.

    Raises:
        ConfigurationError: When the options ask for more replicas than Lightning found IPUs.
    """
    if replicas > len(devices):
        raise ConfigurationError(
            f"The poptorch options ask for replicationFactor({replicas}), but only {len(devices)} IPU(s) can be "
            f"reserved in this process. Lower the replication factor, or run on a system with {replicas} IPUs (under "
            "emulation, raise LIGHTNING_ACCEL_EMULATED_DEVICES)."
        )
    return list(devices[:replicas])
