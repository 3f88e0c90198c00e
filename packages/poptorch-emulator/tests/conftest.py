"""The poptorch emulator's own tests: they read its internals (lightning_accel.poptorch_emulator) on any machine.

The behaviour a Lightning user sees through poptorch is tested in packages/graphcore/tests, which also run on IPUs.
"""

from __future__ import annotations

import os

# Set before anything reads the emulation settings.
os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "ipu")
