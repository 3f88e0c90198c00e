"""Stand-in for ``habana_frameworks.torch.distributed.hccl`` (importing the real one registers the backend)."""

imported = True
