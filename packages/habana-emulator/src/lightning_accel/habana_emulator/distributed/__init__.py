"""Emulation of ``habana_frameworks.torch.distributed``; import :mod:`.hccl` to register the ``"hccl"`` backend."""

__all__: list[str] = []
