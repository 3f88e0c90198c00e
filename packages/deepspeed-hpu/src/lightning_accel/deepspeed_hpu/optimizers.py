"""Checks of the optimizer DeepSpeed will run, made before ``deepspeed.initialize`` so that errors are clear."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

__all__ = ["check_client_optimizer", "check_config_optimizer", "is_offloading_optimizer"]


def is_offloading_optimizer(config: Mapping[str, Any]) -> bool:
    """Whether the config offloads the optimizer (to CPU or NVMe)."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, Mapping):
        return False
    offload = zero.get("offload_optimizer")
    return isinstance(offload, Mapping) and offload.get("device", "none") in ("cpu", "nvme")


def check_client_optimizer(optimizer: torch.optim.Optimizer, config: Mapping[str, Any]) -> None:
    """Refuse an optimizer from ``configure_optimizers`` that DeepSpeed cannot run with this config.

    Raises:
        ConfigurationError: For a torch optimizer with optimizer offload (DeepSpeed needs its CPU optimizers there),
            or an optimizer ZeRO has not been tested with while ``zero_allow_untested_optimizer`` is false.
    """
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    from deepspeed.ops.lion import DeepSpeedCPULion
    from deepspeed.runtime.zero.utils import ZERO_SUPPORTED_OPTIMIZERS

    name = type(optimizer).__name__
    if (
        is_offloading_optimizer(config)
        and not isinstance(optimizer, (DeepSpeedCPUAdam, DeepSpeedCPULion))
        and config.get("zero_force_ds_cpu_optimizer", True)
    ):
        raise ConfigurationError(
            f"configure_optimizers returned {name}, but with offload_optimizer=True DeepSpeed steps the optimizer on "
            "the host and accepts only its CPU optimizers there. Accepted: deepspeed.ops.adam.DeepSpeedCPUAdam, "
            "deepspeed.ops.lion.DeepSpeedCPULion, or an 'optimizer' section in the DeepSpeed config with "
            "configure_optimizers returning None. To run another optimizer anyway (slow), set "
            '"zero_force_ds_cpu_optimizer": false in the config.'
        )
    zero = config.get("zero_optimization")
    stage = zero.get("stage", 0) if isinstance(zero, Mapping) else 0
    if (
        stage
        and not config.get("zero_allow_untested_optimizer", False)
        and type(optimizer) not in ZERO_SUPPORTED_OPTIMIZERS
    ):
        raise ConfigurationError(
            f"configure_optimizers returned {name}, which DeepSpeed has not tested with ZeRO stage {stage}, and "
            "zero_allow_untested_optimizer is false. Accepted: torch.optim.Adam/AdamW, DeepSpeed's optimizers, or "
            "HPUDeepSpeedStrategy(zero_allow_untested_optimizer=True) (or the same key in the config)."
        )


def check_config_optimizer(config: Mapping[str, Any]) -> None:
    """Refuse an ``optimizer.type`` in the config that neither DeepSpeed nor ``torch.optim`` provides.

    Raises:
        ConfigurationError: Naming the type and the accepted ones.
    """
    section = config.get("optimizer")
    if not isinstance(section, Mapping):
        return
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

    kind = section.get("type")
    if isinstance(kind, str) and (kind.lower() in DEEPSPEED_OPTIMIZERS or hasattr(torch.optim, kind)):
        return
    raise ConfigurationError(
        f"config['optimizer']['type']={kind!r} is not an optimizer DeepSpeed can build. Accepted: DeepSpeed's "
        f"{', '.join(sorted(DEEPSPEED_OPTIMIZERS))} (any case), or the name of a torch.optim class (e.g. 'SGD'). Or "
        "return the optimizer from configure_optimizers, which wins over the config."
    )
