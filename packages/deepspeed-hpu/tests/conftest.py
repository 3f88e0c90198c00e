"""Run the DeepSpeed-on-HPU suite on the Habana SDK emulator, with DeepSpeed's HPU accelerator."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Set before anything reads the emulation settings or imports deepspeed.
os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "hpu")
os.environ.setdefault("DS_ACCELERATOR", "hpu")  # DeepSpeed's HPU accelerator, over the emulated SDK
# JIT-built DeepSpeed ops are cached beside the environment's torch (child processes inherit the setting): a run reuses
# what an earlier run of the same environment built, and nothing is left behind outside it. nox sets one folder for all
# its sessions instead, so a run builds them once.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
