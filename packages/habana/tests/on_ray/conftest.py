"""The Ray tests need the ``lightning-accel-habana[ray]`` extra; ``nox -s ray_tests`` installs it and runs them.

Other sessions do not install Ray (nor, for the habana suite, lightning-accel-deepspeed-hpu), so without them the
files that need them are not collected, unless ``LIGHTNING_ACCEL_REQUIRE_RAY=1`` (set by ``ray_tests``) says that
both must be there: then a missing one fails the run instead of hiding the tests.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

_REQUIRED = os.environ.get("LIGHTNING_ACCEL_REQUIRE_RAY") == "1"

collect_ignore_glob: list[str] = []
if importlib.util.find_spec("ray") is None and not _REQUIRED:
    collect_ignore_glob.append("test_*.py")
elif importlib.util.find_spec("lightning_accel.deepspeed_hpu") is None and not _REQUIRED:
    collect_ignore_glob.append("test_ray_deepspeed.py")


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two epochs of DDP on two workers, uninterrupted; its folder holds each worker's report and the checkpoints."""
    from _ray_helpers import train

    out = tmp_path_factory.mktemp("ray-whole")
    train("whole", out)
    return out
