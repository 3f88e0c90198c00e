"""Version of lightning-accel-poptorch-emulator."""

__version__ = "0.1.0"
