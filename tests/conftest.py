import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def run():  # type: ignore[no-untyped-def]
    def _run(
        args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        # A developer's own emulation or SDK settings must not reach the child: each test names what it needs.
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("LIGHTNING_ACCEL_", "PT_HPU_", "HABANA_"))}
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=600
        )

    return _run
