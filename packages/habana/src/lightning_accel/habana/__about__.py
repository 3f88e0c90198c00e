"""Version of lightning-accel-habana."""

__version__ = "0.1.0"
