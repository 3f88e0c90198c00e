"""A precision plugin that the strategies substitute for Lightning's CUDA-flavoured mixed precision."""

from __future__ import annotations

from lightning.pytorch.plugins.precision import MixedPrecision


class TestMixedPrecision(MixedPrecision):
    """CPU autocast in bfloat16."""

    def __init__(self) -> None:
        super().__init__("bf16-mixed", "cpu")


def translate(plugin: object) -> object:
    if type(plugin) is MixedPrecision:
        return TestMixedPrecision()
    return plugin
