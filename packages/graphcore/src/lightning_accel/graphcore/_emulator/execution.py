"""Execution strategies: how the blocks of a multi-IPU model are grouped into stages and scheduled."""

from __future__ import annotations

from .enums import AutoStage

__all__ = ["PipelinedExecution", "ShardedExecution", "Stage"]


class Stage:
    """Groups blocks (by ``user_id``) into one pipeline stage.

    Example:
        >>> stage = Stage("encoder", "decoder")
        >>> stage.blocks
        ('encoder', 'decoder')
    """

    def __init__(self, *block_ids: str) -> None:
        for block_id in block_ids:
            if not isinstance(block_id, str):
                raise TypeError(f"Stage(*block_ids) takes block user_id strings, got {block_id!r}.")
        self.blocks = tuple(block_ids)


class PipelinedExecution:
    """Run the stages as a pipeline (poptorch's default for models with blocks).

    Example:
        >>> strategy = PipelinedExecution(Stage("a"), Stage("b"))
        >>> len(strategy.stages)
        2
    """

    def __init__(self, *stages: Stage | str | AutoStage) -> None:
        self.auto_stage = AutoStage.SameAsIpu
        self.stages: tuple[Stage, ...] = ()
        if len(stages) == 1 and isinstance(stages[0], AutoStage):
            self.auto_stage = stages[0]
            return
        converted = []
        for stage in stages:
            if isinstance(stage, str):
                converted.append(Stage(stage))
            elif isinstance(stage, Stage):
                converted.append(stage)
            else:
                raise TypeError(
                    f"PipelinedExecution(*stages) takes Stage objects, block ids or one AutoStage, got {stage!r}."
                )
        self.stages = tuple(converted)

    @property
    def pipelined(self) -> bool:
        """Whether stages run concurrently as a pipeline (which sets the micro-batch requirements)."""
        return True

    def stage_of(self, user_id: str | None, ipu_id: int) -> int:
        """The stage a block belongs to: its explicit ``Stage`` if any, else (``SameAsIpu``) its IPU."""
        for index, stage in enumerate(self.stages):
            if user_id is not None and user_id in stage.blocks:
                return index
        return ipu_id


class ShardedExecution(PipelinedExecution):
    """Run the stages one after another (no pipeline, so no micro-batch requirement).

    Example:
        >>> ShardedExecution(Stage("a")).pipelined
        False
    """

    @property
    def pipelined(self) -> bool:
        """Sharded stages run sequentially."""
        return False
