"""Which DeepSpeed accelerator runs the HPUs: its ``HPU_Accelerator`` (``DS_ACCELERATOR=hpu``), over HCCL.

DeepSpeed picks its accelerator once, while ``deepspeed`` is being imported. The emulated SDK answers to the SDK's
module names and makes ``"hpu"`` a torch device, so DeepSpeed runs the same accelerator on Gaudi and on the emulator.
"""

from __future__ import annotations

import os
import sys

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import sdk

__all__ = [
    "DS_ACCELERATOR_VAR",
    "check_deepspeed_accelerator",
    "check_process_group_backend",
    "prepare_deepspeed_import",
]

DS_ACCELERATOR_VAR = "DS_ACCELERATOR"


def prepare_deepspeed_import() -> None:
    """Point ``DS_ACCELERATOR`` at the device HPU tensors live on, unless deepspeed is already imported or it is set.

    Raises:
        DeviceUnavailableError: When neither the Habana SDK nor its emulator can be used.
    """
    wanted = sdk.device_type()
    if "deepspeed" not in sys.modules:
        os.environ.setdefault(DS_ACCELERATOR_VAR, wanted)


def check_deepspeed_accelerator() -> None:
    """Check that DeepSpeed runs the accelerator of the device HPU tensors live on.

    Raises:
        ConfigurationError: When DeepSpeed picked another one (deepspeed imported too early, or ``DS_ACCELERATOR``
            set to something else).
    """
    from deepspeed.accelerator import get_accelerator

    found = get_accelerator().device_name()
    wanted = sdk.device_type()
    if found != wanted:
        raise ConfigurationError(
            f"DeepSpeed runs its {found!r} accelerator, but HPU tensors live on {wanted!r} devices. DeepSpeed picks "
            "its accelerator when "
            f"`deepspeed` is first imported: set {DS_ACCELERATOR_VAR}={wanted} (now "
            f"{os.environ.get(DS_ACCELERATOR_VAR)!r}) before importing deepspeed, or import "
            "lightning_accel.deepspeed_hpu before deepspeed."
        )


def check_process_group_backend(backend: str | None, owner: str) -> None:
    """Refuse a ``process_group_backend`` other than HCCL's (``None`` means HCCL too).

    Args:
        backend: The ``process_group_backend`` given.
        owner: The class it was given to, named in the error (``"HPUDeepSpeedStrategy"``, or ``"DeepSpeedStrategy"``
            for a Lightning instance handed over).

    Raises:
        ConfigurationError: Naming ``owner``, the backend and the accepted ones.
    """
    if backend not in (None, sdk.distributed_backend()):
        raise ConfigurationError(
            f"{owner}(process_group_backend={backend!r}) does not run on HPUs. Accepted: "
            f"process_group_backend={sdk.distributed_backend()!r} or None (HCCL, Gaudi's collective library)."
        )
