"""Atomic replacement of checkpoints that several ranks write (directories of shards), for any strategy.

DeepSpeed and sharded FSDP write a checkpoint as a directory of files (one per rank and kind, plus DeepSpeed's
``latest`` tag) and overwrite them one by one, so a process killed while it overwrites ``last.ckpt`` leaves a directory
mixing two checkpoints, or truncated files. With :class:`StagedCheckpoints` every save goes to a staging path next to
the target and is swapped in only once every rank has finished writing:

1. ``.<name>.partial`` is written (a leftover from an earlier killed save is removed first);
2. the target, if there is one, is renamed to ``.<name>.old``;
3. the staging directory is renamed to the target, and ``.<name>.old`` is removed.

A kill before step 2 leaves the previous checkpoint in place. A kill between steps 2 and 3 leaves no target but a
complete ``.<name>.partial`` and the previous checkpoint as ``.<name>.old``; :func:`recover` (run before every save
and load) finishes the swap. Renames of directories are atomic on POSIX file systems; the swap needs the target's
directory to be writable, and with several nodes a file system every node sees (as DeepSpeed's ``latest`` tag does).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable

__all__ = [
    "StagedCheckpoints",
    "StagedFabricCheckpoints",
    "fsync_directory",
    "old_path",
    "recover",
    "remove_leftovers",
    "staging_path",
    "swap_in",
]


def staging_path(target: str | os.PathLike[str]) -> Path:
    """Where a new checkpoint for ``target`` is written before it is swapped in."""
    path = Path(target)
    return path.with_name(f".{path.name}.partial")


def old_path(target: str | os.PathLike[str]) -> Path:
    """Where the previous checkpoint at ``target`` waits while the new one is swapped in."""
    path = Path(target)
    return path.with_name(f".{path.name}.old")


def recover(target: str | os.PathLike[str]) -> None:
    """Finish a swap that a killed process left half done; a no-op when ``target`` exists or never existed."""
    path = Path(target)
    old = old_path(path)
    if path.exists():
        # Killed after the swap, before the previous checkpoint was removed.
        _remove(old)
        return
    if not old.exists():
        return
    staging = staging_path(path)
    # The target is renamed away only after the staging directory is complete, so a staging directory next to an
    # old one is the newer, complete checkpoint.
    os.rename(staging if staging.exists() else old, path)
    fsync_directory(path.parent)
    _remove(old)


def remove_leftovers(target: str | os.PathLike[str]) -> None:
    """Remove the staging directory of an earlier save that did not finish (the target itself is left alone)."""
    recover(target)
    _remove(staging_path(target))


def swap_in(target: str | os.PathLike[str]) -> None:
    """Replace ``target`` with its complete staging directory."""
    path = Path(target)
    staging, old = staging_path(path), old_path(path)
    _remove(old)
    if path.exists():
        # Also a file: a single-file checkpoint of another strategy where this directory goes is replaced too.
        os.rename(path, old)
    os.rename(staging, path)
    fsync_directory(path.parent)
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Flush the entries of ``directory`` to disk: a rename in it is durable only then (a no-op where it cannot)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class StagedCheckpoints:
    """Mixin for a Lightning strategy: ``save_checkpoint`` writes aside and swaps in; ``load_checkpoint`` recovers.

    Put it before the Lightning strategy (``DeepSpeedStrategy``, ``FSDPStrategy``) whose saves it stages; it uses
    the strategy's ``broadcast``, ``barrier`` and ``is_global_zero``. Local paths only (the renames are local).

    Example:
        >>> from lightning.pytorch.strategies import FSDPStrategy
        >>> from lightning_accel.core.checkpoint_swap import StagedCheckpoints
        >>> class MyFSDPStrategy(StagedCheckpoints, FSDPStrategy):
        ...     pass
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any | None = None) -> None:
        """Save as the Lightning strategy does, into a staging path that replaces ``filepath`` once all ranks wrote.

        A process killed at any moment of the save leaves a whole checkpoint at ``filepath``: the previous one, or
        the new one when the kill came during the swap (the next save or load finishes it).
        """
        _save_staged(
            self,
            filepath,
            lambda staging: super(StagedCheckpoints, self).save_checkpoint(  # type: ignore[misc]
                checkpoint, staging, storage_options
            ),
        )

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """Load as the Lightning strategy does, after finishing a swap that a killed process left half done."""
        _recover_on_rank_zero(self, checkpoint_path)
        loaded: dict[str, Any] = super().load_checkpoint(checkpoint_path, weights_only)  # type: ignore[misc]
        return loaded


class StagedFabricCheckpoints:
    """:class:`StagedCheckpoints` for a Fabric strategy (Fabric's ``save_checkpoint(path, state, ...)`` signature).

    Put it before the Fabric strategy (``FSDPStrategy``, ``ModelParallelStrategy``) whose saves it stages.

    Example:
        >>> from lightning.fabric.strategies import FSDPStrategy
        >>> from lightning_accel.core.checkpoint_swap import StagedFabricCheckpoints
        >>> class MyFSDPStrategy(StagedFabricCheckpoints, FSDPStrategy):
        ...     pass
    """

    def save_checkpoint(
        self,
        path: Any,
        state: dict[str, Any],
        storage_options: Any | None = None,
        filter: dict[str, Callable[[str, Any], bool]] | None = None,
    ) -> None:
        """Save as the Fabric strategy does, into a staging path that replaces ``path`` once all ranks wrote.

        A process killed at any moment of the save leaves a whole checkpoint at ``path``: the previous one, or the
        new one when the kill came during the swap (the next save or load finishes it).
        """
        _save_staged(
            self,
            path,
            lambda staging: super(StagedFabricCheckpoints, self).save_checkpoint(  # type: ignore[misc]
                staging, state, storage_options=storage_options, filter=filter
            ),
        )

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Load as the Fabric strategy does, after finishing a swap that a killed process left half done."""
        _recover_on_rank_zero(self, path)
        loaded: dict[str, Any] = super().load_checkpoint(path, *args, **kwargs)  # type: ignore[misc]
        return loaded


def _save_staged(strategy: Any, target: Any, write: Callable[[Path], None]) -> None:
    """``write`` the checkpoint for ``target`` into its staging path on every rank, then swap it in on rank 0."""
    target = strategy.broadcast(target)
    if strategy.is_global_zero:
        remove_leftovers(target)
    strategy.barrier("lightning_accel_checkpoint_staging")
    write(staging_path(target))
    strategy.barrier("lightning_accel_checkpoint_written")
    if strategy.is_global_zero:
        swap_in(target)
    strategy.barrier("lightning_accel_checkpoint_swapped")


def _recover_on_rank_zero(strategy: Any, target: Any) -> None:
    if strategy.is_global_zero:
        recover(target)
    strategy.barrier("lightning_accel_checkpoint_recovered")
