"""Emulation of ``habana_frameworks.torch.utils``."""

__all__: list[str] = []
