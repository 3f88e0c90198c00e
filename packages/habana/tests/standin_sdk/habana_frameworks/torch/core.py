"""Stand-in for ``habana_frameworks.torch.core`` (``htcore``): records each ``mark_step``."""

marked: list[bool] = []


def mark_step(sync: bool = False) -> None:
    marked.append(sync)


def is_lazy() -> bool:
    return True
