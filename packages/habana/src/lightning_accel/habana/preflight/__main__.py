"""``python -m lightning_accel.habana.preflight``: the same as ``lightning-accel preflight``."""

from __future__ import annotations

import sys

from .runner import main

if __name__ == "__main__":
    sys.exit(main())
