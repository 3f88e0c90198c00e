"""configure_recipe_cache: PT_HPU_RECIPE_CACHE_CONFIG checked and set, and what the ranks a launcher starts see."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana.recipe_cache import RECIPE_CACHE_VAR, configure_recipe_cache


@pytest.fixture(autouse=True)
def _variable_restored() -> Iterator[None]:
    before = os.environ.get(RECIPE_CACHE_VAR)
    yield
    if before is None:
        os.environ.pop(RECIPE_CACHE_VAR, None)
    else:
        os.environ[RECIPE_CACHE_VAR] = before


def test_the_directory_is_created_and_the_variable_set_in_the_sdks_format(tmp_path: Path) -> None:
    cache = tmp_path / "recipes" / "job-1"
    value = configure_recipe_cache(cache, delete_on_init=True, max_size_mb=4096)
    assert value == f"{cache},true,4096"
    assert os.environ[RECIPE_CACHE_VAR] == value
    assert cache.is_dir() and not list(cache.iterdir())  # the write check leaves nothing behind
    assert configure_recipe_cache(str(cache)) == f"{cache},false,1024"  # the SDK's defaults


def test_the_ranks_a_launcher_starts_inherit_the_setting(tmp_path: Path) -> None:
    value = configure_recipe_cache(tmp_path)
    code = f"import os; print(os.environ[{RECIPE_CACHE_VAR!r}])"
    rank = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert rank.stdout.strip() == value


def test_a_path_that_cannot_be_a_directory_is_refused_with_the_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigurationError) as error:
        configure_recipe_cache(blocker / "cache")
    assert str(error.value).startswith(
        f"configure_recipe_cache(path={str(blocker / 'cache')!r}): the directory cannot be created or written (Not a "
        "directory). Every rank writes compiled recipes there: pass a directory this user can write to"
    )
    assert RECIPE_CACHE_VAR not in os.environ or os.environ[RECIPE_CACHE_VAR] != str(blocker / "cache")


def test_a_comma_in_the_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"has a comma, which the SDK reads as the end of the path"):
        configure_recipe_cache(tmp_path / "a,b")
    assert not (tmp_path / "a,b").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_size_mb": 0}, r"configure_recipe_cache\(max_size_mb=0\) is not accepted: a positive int"),
        ({"max_size_mb": 1.5}, r"configure_recipe_cache\(max_size_mb=1.5\) is not accepted: a positive int"),
        ({"delete_on_init": "yes"}, r"configure_recipe_cache\(delete_on_init='yes'\) is not accepted: True or False"),
    ],
)
def test_bad_arguments_name_the_argument_and_what_is_accepted(
    tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        configure_recipe_cache(tmp_path, **kwargs)  # type: ignore[arg-type]
    assert RECIPE_CACHE_VAR not in os.environ or str(tmp_path) not in os.environ[RECIPE_CACHE_VAR]
