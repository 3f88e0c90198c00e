"""Atomic replacement of DeepSpeed checkpoint directories.

DeepSpeed writes a checkpoint as a directory of files (one per rank and kind, plus the ``latest`` tag) and overwrites
them one by one, so a process killed while it overwrites ``last.ckpt`` leaves a directory mixing two checkpoints, or
truncated files. Here every save goes to a staging directory next to the target and is swapped in only once every rank
has finished writing:

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

__all__ = ["old_path", "recover", "remove_leftovers", "staging_path", "swap_in"]


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
    _fsync_directory(path.parent)
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
    _fsync_directory(path.parent)
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _fsync_directory(directory: Path) -> None:
    # A rename is durable only once the directory entry is on disk; not every platform can open a directory.
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
