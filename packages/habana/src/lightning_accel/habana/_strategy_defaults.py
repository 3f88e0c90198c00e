"""The checkpoint I/O default shared by the Trainer and Fabric HPU strategies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .checkpoint_io import HPUCheckpointIO

if TYPE_CHECKING:
    from lightning.fabric.plugins import CheckpointIO

__all__ = ["HPUCheckpointIODefault"]


class HPUCheckpointIODefault:
    """Mixin for an HPU strategy: checkpoints go through :class:`HPUCheckpointIO` unless another I/O was given.

    Both trees' strategies keep the plugin in ``_checkpoint_io`` and take a ``lightning.fabric`` ``CheckpointIO``, so
    one mixin serves the Trainer and the Fabric strategies.
    """

    _checkpoint_io: CheckpointIO | None

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """The checkpoint I/O; :class:`HPUCheckpointIO` unless another was given."""
        if self._checkpoint_io is None:
            self._checkpoint_io = HPUCheckpointIO()
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, io: CheckpointIO | None) -> None:
        self._checkpoint_io = io
