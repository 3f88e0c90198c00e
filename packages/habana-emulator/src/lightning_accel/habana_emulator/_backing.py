"""The real device that backs the emulated HPUs, taken from the core's emulation settings."""

from __future__ import annotations

import torch

from lightning_accel.core.emulation import EMULATE_BACKEND_VAR, emulation_settings
from lightning_accel.core.errors import ConfigurationError

__all__ = ["backing_device", "backing_type", "emulated_device_count"]


def backing_type() -> str:
    """``"cpu"`` or ``"cuda"``: the device type tensors of the emulated HPUs live on.

    Raises:
        ConfigurationError: When the CUDA backing is asked for but this torch build cannot use CUDA.
    """
    backend = emulation_settings().backend
    if backend == "cuda" and not torch.cuda.is_available():
        raise ConfigurationError(
            f"{EMULATE_BACKEND_VAR}='cuda' asks the HPU emulator to keep tensors on a CUDA GPU, but "
            "torch.cuda.is_available() is False in this process. Accepted: 'cuda' on a machine with a usable GPU, or "
            f"'cpu'; unset {EMULATE_BACKEND_VAR} for the CPU backing."
        )
    return backend


def emulated_device_count() -> int:
    """How many HPUs the emulator reports (``LIGHTNING_ACCEL_EMULATED_DEVICES``)."""
    return emulation_settings().devices


def backing_device(index: int | None = None) -> torch.device:
    """The backing device of emulated HPU ``index`` (the current one when ``None``).

    On the CPU backing every emulated HPU shares the host, so the device has no index. On the CUDA backing the
    emulated HPUs are spread over the visible GPUs round-robin.
    """
    kind = backing_type()
    if kind == "cpu":
        return torch.device("cpu")
    if index is None:
        from .hpu._devices import module_id

        index = module_id()
    return torch.device("cuda", index % torch.cuda.device_count())
