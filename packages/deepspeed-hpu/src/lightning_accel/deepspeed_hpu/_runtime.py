"""Which DeepSpeed accelerator runs the HPUs, and the process-level settings DeepSpeed needs for it.

DeepSpeed picks its accelerator once, while ``deepspeed`` is being imported. On Gaudi that is its ``HPU_Accelerator``
(over HCCL). Under the emulator, stock torch cannot hold ``hpu`` tensors, so DeepSpeed must run the accelerator of the
device that backs the emulated HPUs (``cpu``, or ``cuda``) over the emulated ``"hccl"`` backend.
"""

from __future__ import annotations

import os
import sys

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import sdk

__all__ = ["DS_ACCELERATOR_VAR", "check_deepspeed_accelerator", "prepare_deepspeed_import", "skip_cpu_shm_op"]

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
            f"DeepSpeed runs its {found!r} accelerator, but HPU tensors live on {wanted!r} devices here "
            f"({'the HPU emulator' if sdk.is_emulated() else 'Gaudi'}). DeepSpeed picks its accelerator when "
            f"`deepspeed` is first imported: set {DS_ACCELERATOR_VAR}={wanted} (now "
            f"{os.environ.get(DS_ACCELERATOR_VAR)!r}) before importing deepspeed, or import "
            "lightning_accel.deepspeed_hpu before deepspeed."
        )


def skip_cpu_shm_op() -> None:
    """Keep DeepSpeed's CPU accelerator from building its shared-memory collectives op.

    ``deepspeed.init_distributed`` JIT-compiles ``deepspeed_shm_comm`` (about 30 s) on the CPU accelerator and then
    routes all-reduces through it. The emulated HCCL is gloo; the op is a CPU-only shortcut that real HPUs never use,
    and it crashes tensor-parallel inference unless ``LOCAL_SIZE`` equals the world size. Without it DeepSpeed uses the
    process group's own collectives, as on Gaudi.
    """
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() != "cpu":
        return
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
