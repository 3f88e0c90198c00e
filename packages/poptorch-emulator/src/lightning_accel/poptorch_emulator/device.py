"""The emulated IPU system: how many IPUs exist and which executors hold them."""

from __future__ import annotations

import logging

from lightning_accel.core.emulation import emulation_settings

from .errors import Error

__all__ = ["acquire", "ipuHardwareIsAvailable", "ipuHardwareVersion", "release", "reserve_count", "total_ipus"]

MAX_IPUS_PER_PROCESS = 64
_attached: dict[int, int] = {}
log = logging.getLogger("poptorch")


def total_ipus() -> int:
    """Number of IPUs in the emulated system (``LIGHTNING_ACCEL_EMULATED_DEVICES``)."""
    return emulation_settings().devices


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:
    """Whether the (emulated) system has at least ``num_ipus`` IPUs."""
    return 0 < num_ipus <= total_ipus()


def ipuHardwareVersion() -> int:
    """The IPU generation: 2 (Mk2) for the emulated system."""
    assert ipuHardwareIsAvailable(), "No IPU hardware available on this system"
    return 2


def reserve_count(used_ipus: int, replication_factor: int, auto_round: bool) -> int:
    """The IPUs a model needs (``used x replicas``), checked and rounded as poptorch does.

    Raises:
        Error: When the count is not a power of two (and ``autoRoundNumIPUs`` is off) or exceeds 64.
    """
    num_ipus = used_ipus * replication_factor
    rounded = 1 << (num_ipus - 1).bit_length()
    if rounded != num_ipus:
        common = ", because PopTorch must reserve a power of 2 or maximum of 64 IPUs per process"
        if not auto_round:
            raise Error(
                f"The model specifies the use of {num_ipus} IPUs, however PopTorch must reserve a minimum of "
                f"{rounded} in order to allow the model to run{common}. Please reconfigure your model to use a "
                "different number of IPUs or set poptorch.Options().autoRoundNumIPUs(True)."
            )
        log.warning(
            "Reserving %d IPUs when the model specifices the use of only %d%s. %d will be reserved but not used.",
            rounded,
            num_ipus,
            common,
            rounded - num_ipus,
        )
        num_ipus = rounded
    if num_ipus > MAX_IPUS_PER_PROCESS:
        raise Error(
            f"Too many IPUs requested ({num_ipus}). Experiments that need more than 64 IPUs require distributed "
            "execution."
        )
    return num_ipus


def acquire(owner: int, num_ipus: int) -> None:
    """Attach ``num_ipus`` IPUs to executor ``owner``.

    Raises:
        Error: "Failed to acquire N IPU(s)" when the system is too small or the IPUs are attached elsewhere.
    """
    total = total_ipus()
    busy = sum(count for key, count in _attached.items() if key != owner)
    if num_ipus > total:
        raise Error(
            f"Failed to acquire {num_ipus} IPU(s)\nNo device found on the system with {num_ipus} IPUs: the "
            f"configuration needs changing (the emulated system has {total}; set LIGHTNING_ACCEL_EMULATED_DEVICES "
            "to emulate more)."
        )
    if num_ipus > total - busy:
        raise Error(
            f"Failed to acquire {num_ipus} IPU(s)\n{busy} of the {total} IPUs are attached to other models: call "
            "detachFromDevice() or destroy() on them first."
        )
    _attached[owner] = num_ipus


def release(owner: int) -> None:
    """Detach executor ``owner`` from its IPUs (nothing if it holds none)."""
    _attached.pop(owner, None)
