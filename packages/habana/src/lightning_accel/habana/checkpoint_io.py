"""Checkpoint I/O for HPUs: move tensors to the host, then write the file atomically."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.apply_func import apply_to_collection
from lightning.fabric.utilities.cloud_io import get_filesystem
from typing_extensions import override

from lightning_accel.core.checkpoint_swap import fsync_directory

__all__ = ["HPUCheckpointIO"]


def _to_host(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().cpu() if tensor.device.type != "cpu" else tensor


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


class HPUCheckpointIO(TorchCheckpointIO):
    """Saves checkpoints with tensors moved to the host, atomically.

    The checkpoint is written to a temporary file in the target's directory, flushed to disk with ``fsync`` and
    renamed over the target with :func:`os.replace`. If anything fails while saving (an object that cannot be pickled,
    a full disk, a crash), the previous checkpoint at that path stays intact. Remote paths (``s3://...``) are
    serialised in memory first and written in one call through fsspec.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUAccelerator, HPUCheckpointIO, SingleHPUStrategy
        >>> strategy = SingleHPUStrategy(checkpoint_io=HPUCheckpointIO())  # the default of the HPU strategies
    """

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        """Save ``checkpoint`` to ``path``.

        Raises:
            TypeError: When ``storage_options`` is given (not supported by this checkpoint I/O).
        """
        if storage_options is not None:
            raise TypeError(
                f"`Trainer.save_checkpoint(..., storage_options={storage_options!r})` is not supported by "
                f"`{type(self).__name__}`. Remove `storage_options`, or write a custom `CheckpointIO` that uses them."
            )
        host_checkpoint = apply_to_collection(checkpoint, torch.Tensor, _to_host)
        target = str(path)
        if not _is_local(target):
            self._save_remote(host_checkpoint, target)
            return
        target = target.removeprefix("file://")
        directory = os.path.dirname(os.path.abspath(target))
        os.makedirs(directory, exist_ok=True)
        fd, tmp_path = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(host_checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_path, target)
        except BaseException:
            # Whatever went wrong, the half-written file must not stay behind next to the good checkpoint.
            if os.path.exists(tmp_path):
                os.unlink(tmp_path)
            raise
        fsync_directory(directory)

    @staticmethod
    def _save_remote(checkpoint: dict[str, Any], path: str) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        fs = get_filesystem(path)
        fs.makedirs(os.path.dirname(path), exist_ok=True)
        with fs.open(path, "wb") as handle:
            handle.write(buffer.getvalue())
