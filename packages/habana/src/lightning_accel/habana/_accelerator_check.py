"""HPU strategies refuse any accelerator but the HPU's, instead of running on another device or failing deep inside.

When a Trainer run starts on HPUs, Lightning's own profiler (``profiler="pytorch"``) is also pointed at them.
"""

from __future__ import annotations

from typing import Any

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = ["RequiresHPUAccelerator"]


class RequiresHPUAccelerator:
    """Mixin for an HPU strategy of either Lightning tree: set-up starts by checking the accelerator."""

    accelerator: Any  # provided by the Lightning strategy the mixin is combined with

    def _check_hpu_accelerator(self) -> None:
        accelerator = self.accelerator
        name = getattr(type(accelerator), "name", None)
        if not callable(name) or name() != sdk.DEVICE_TYPE:
            raise ConfigurationError(
                f"{type(self).__name__} runs on HPUs, but the accelerator is {type(accelerator).__name__}. Accepted: "
                f"accelerator='hpu' (or an HPUAccelerator instance). To train on another device, use that device's "
                "strategy (e.g. strategy='ddp' with accelerator='cpu')."
            )

    def connect(self, model: Any) -> None:
        """Connect the model as the Lightning strategy does; have a Trainer's ``profiler="pytorch"`` record HPUs.

        The earliest point of a run where both the strategy and the Trainer are known: the profiler starts with the
        first profiled hook, before the environment is set up.
        """
        super().connect(model)  # type: ignore[misc]
        trainer = getattr(model, "_trainer", None)
        if trainer is not None:
            from .profiler import record_hpu_activity

            record_hpu_activity(trainer.profiler)

    def setup_environment(self) -> None:
        """Refuse a non-HPU accelerator, then set up as the Lightning strategy does.

        Raises:
            ConfigurationError: When the accelerator is not the HPU accelerator.
        """
        self._check_hpu_accelerator()
        super().setup_environment()  # type: ignore[misc]
