"""Run the DeepSpeed-on-HPU suite on the Habana SDK emulator, with DeepSpeed's HPU accelerator."""

from __future__ import annotations

import os
import tempfile

# Set before anything reads the emulation settings or imports deepspeed.
os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "hpu")
os.environ.setdefault("DS_ACCELERATOR", "hpu")  # DeepSpeed's HPU accelerator, over the emulated SDK
# One cache of JIT-built DeepSpeed ops for the whole run (child processes inherit it); the tests build none by default.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", tempfile.mkdtemp(prefix="lightning-accel-ds-ops-"))
