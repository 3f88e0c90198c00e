"""The Trainer accelerator for Intel Gaudi (HPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.accelerators import Accelerator
from typing_extensions import override

from . import _devices, _oom, sdk
from ._accelerator_common import HPUDevices

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = ["HPUAccelerator"]


class HPUAccelerator(HPUDevices, Accelerator):
    """Accelerator for Intel Gaudi devices (``accelerator="hpu"``).

    Without Gaudi hardware, set ``LIGHTNING_ACCEL_EMULATE=hpu`` to run on the SDK emulator: the HPUs are then backed
    by the CPU (with a CPU-only build of torch).

    Evaluation runs under :func:`torch.no_grad`, because HPUs do not support :func:`torch.inference_mode`.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUAccelerator, SingleHPUStrategy
        >>> trainer = Trainer(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy(), devices=1)  # doctest: +SKIP

    Raises:
        DeviceUnavailableError: When neither the Habana SDK nor its emulator can be used.
    """

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        """Prepare the Trainer for HPUs: evaluation without inference mode, Gaudi's out-of-memory error recognised.

        HPU graphs cannot run under ``torch.inference_mode``. Gradient accumulation over modules graphed with
        ``make_graphed_callables`` is refused (see ``graphs.check_graphed_callables``). Lightning's
        ``is_oom_error``, the batch-size finder's test, knows CUDA's out-of-memory error only; it then also knows the
        SDK's (see ``_oom``).
        """
        for loop in (trainer.validate_loop, trainer.test_loop, trainer.predict_loop):
            loop.inference_mode = False
        _oom.recognise_hpu_out_of_memory(trainer)
        # Here too, not only in the HPUGraphs callback: a module graphed by hand would accumulate wrong gradients.
        from .graphs import check_graphed_callables

        check_graphed_callables(trainer.lightning_module, trainer.accumulate_grad_batches)

    @staticmethod
    def is_fp8_available() -> tuple[bool, str]:
        """``(True, "")``: every Gaudi the supported SDKs run on (Gaudi 2 and 3) has fp8; opens no device.

        Kept from lightning-habana's API. First-generation Gaudi, the one HPU without fp8, is refused when the SDK
        loads (Intel Gaudi software 1.23 and 1.24 no longer run on it).
        """
        return True, ""

    @staticmethod
    def is_lazy() -> bool:
        """Whether the SDK runs in lazy mode (``PT_HPU_LAZY_MODE=1``); eager is the SDK's default since 1.21."""
        return _devices.is_lazy()

    @override
    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """The SDK's ten memory statistics (``Limit``, ``InUse``, ... ``TotalActiveAllocs``) for DeviceStatsMonitor."""
        return dict(sdk.hpu_module().memory_stats(device))
