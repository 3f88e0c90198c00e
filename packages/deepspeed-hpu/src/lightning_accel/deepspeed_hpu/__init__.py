"""DeepSpeed on Intel Gaudi for PyTorch Lightning (in development: the strategy is not implemented yet)."""

from lightning_accel.deepspeed_hpu.__about__ import __version__

__all__ = ["__version__"]
