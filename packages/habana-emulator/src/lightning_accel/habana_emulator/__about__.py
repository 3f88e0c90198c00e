"""Version of lightning-accel-habana-emulator."""

__version__ = "0.1.0"
