"""The SDK's on-disk recipe cache (``PT_HPU_RECIPE_CACHE_CONFIG``), checked before a job relies on it.

Gaudi compiles each graph into a recipe; with a recipe cache the compiled recipes are kept on disk, so a restarted job,
or the other ranks of a job, read a recipe instead of compiling it again. The SDK reads one variable
(gaudi-pytorch-bridge 1.19.0, ``scripts/env_flags.yaml:65-76``, ``habana_serialization/recipe_cache_config.cpp``):
``PT_HPU_RECIPE_CACHE_CONFIG=<directory>,<delete on init>,<max size in MB>``.

What the SDK does with it, and so what this module checks first:

* the directory must exist (``cache_file_handler.cpp:53``, an assertion deep in the first compilation otherwise):
  it is created here, and a path that cannot be created or written is refused with the reason;
* the three values are split on commas (``recipe_cache_config.cpp:104-113``), so a directory with a comma in its path
  would be read as two values: refused;
* with ``delete on init``, the first process of each machine (``LOCAL_RANK`` 0) empties the directory when it starts
  (``cache_file_handler.cpp:54-76``); the ranks share the directory, guarded by file locks (``flock``,
  ``cache_file_handler.cpp:93-110``), so a recipe one rank has written is read by the others instead of compiled
  again (ranks that miss the same recipe at the same moment each compile it);
* the size bound (default 1024 MB per worker, ``env_flags.yaml:715-719``) keeps the directory under it by evicting
  recipes; it must be a positive whole number of MB;
* in inference mode the SDK appends the rank to the path (one directory per rank, ``recipe_cache_config.cpp:67-71``).

The variable is read by the SDK's C++ runtime and inherited by the ranks a launcher starts: set it (with
:func:`configure_recipe_cache`) at the top of the training script, before the Trainer or Fabric starts its processes.
On a multi-node job, use a directory every node can reach, and leave ``delete_on_init`` off unless every node starts
from an empty cache: each node's first process would empty the shared directory while others may be writing to it.

The emulator compiles with Inductor and keeps no recipes, so on the emulator the setting is checked and set, and
nothing is written to the directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from lightning_accel.core.errors import ConfigurationError

__all__ = ["RECIPE_CACHE_VAR", "configure_recipe_cache"]

RECIPE_CACHE_VAR = "PT_HPU_RECIPE_CACHE_CONFIG"
_DEFAULT_SIZE_MB = 1024


def _writable_directory(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".lightning-accel-write-check-"):
            pass
    except OSError as error:
        raise ConfigurationError(
            f"configure_recipe_cache(path={str(path)!r}): the directory cannot be created or written "
            f"({error.strerror or error}). Every rank writes compiled recipes there: pass a directory this user can "
            "write to (on a shared file system for a multi-node job)."
        ) from error


def configure_recipe_cache(
    path: str | os.PathLike[str], *, delete_on_init: bool = False, max_size_mb: int = _DEFAULT_SIZE_MB
) -> str:
    """Check a recipe cache directory, create it, and set ``PT_HPU_RECIPE_CACHE_CONFIG`` for this job.

    Args:
        path: The cache directory (created if missing). Shared by the ranks of the job.
        delete_on_init: Empty the directory when the job starts (the first process of each machine does it).
        max_size_mb: The bound the SDK keeps the directory under, in MB (a positive int; the SDK's default is 1024).

    Returns:
        The value set, e.g. ``"/data/recipes,false,1024"``.

    Raises:
        ConfigurationError: When the path has a comma, cannot be created or written, or an argument is not accepted.

    Example:
        >>> from lightning_accel.habana.recipe_cache import configure_recipe_cache
        >>> configure_recipe_cache("/shared/recipe-cache", max_size_mb=4096)  # doctest: +SKIP
        '/shared/recipe-cache,false,4096'
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ConfigurationError(
            f"configure_recipe_cache(path={path!r}) is not accepted: pass the cache directory as a str or Path."
        )
    directory = Path(path).expanduser().absolute()
    if "," in str(directory):
        raise ConfigurationError(
            f"configure_recipe_cache(path={str(directory)!r}) has a comma, which the SDK reads as the end of the path "
            f"({RECIPE_CACHE_VAR} is '<path>,<delete>,<size MB>'). Choose a directory without a comma."
        )
    if not isinstance(delete_on_init, bool):
        raise ConfigurationError(
            f"configure_recipe_cache(delete_on_init={delete_on_init!r}) is not accepted: True or False."
        )
    if not isinstance(max_size_mb, int) or isinstance(max_size_mb, bool) or max_size_mb <= 0:
        raise ConfigurationError(
            f"configure_recipe_cache(max_size_mb={max_size_mb!r}) is not accepted: a positive int, the directory's "
            f"bound in MB (the SDK's default is {_DEFAULT_SIZE_MB})."
        )
    _writable_directory(directory)
    value = f"{directory},{'true' if delete_on_init else 'false'},{max_size_mb}"
    os.environ[RECIPE_CACHE_VAR] = value
    return value
