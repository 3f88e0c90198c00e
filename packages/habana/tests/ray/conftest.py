"""The Ray tests need the ``lightning-accel-habana[ray]`` extra; ``nox -s ray_tests`` installs it and runs them.

Other sessions do not install Ray, so without it this folder is not collected, unless
``LIGHTNING_ACCEL_REQUIRE_RAY=1`` (set by ``ray_tests``) says that Ray must be there: then a missing Ray fails the run
instead of hiding the tests.
"""

from __future__ import annotations

import importlib.util
import os

collect_ignore_glob: list[str] = []
if importlib.util.find_spec("ray") is None and os.environ.get("LIGHTNING_ACCEL_REQUIRE_RAY") != "1":
    collect_ignore_glob.append("test_*.py")
