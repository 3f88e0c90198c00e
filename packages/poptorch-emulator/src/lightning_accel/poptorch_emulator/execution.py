"""Execution strategies: how the blocks of a multi-IPU model are grouped into stages and placed on IPUs.

The rules are poptorch 3.4's (``python/options.py:672-1143``, ``python/_options_impl.py:196-254``):

- a block is named by its ``user_id``, or by a counter (``"0"``, ``"1"``, ...) when it has none;
- with explicit stages (``PipelinedExecution("A", "B")``, ``Stage("A").ipu(1)``, phases), a block runs on its
  stage's IPU if the stage sets one, else on its own ``ipu_id``, else on the IPU numbered like its stage; a block
  no stage names is refused;
- without them, ``AutoStage.SameAsIpu`` (the default) makes the block's ``ipu_id`` its stage and refuses a block
  without one; ``AutoStage.AutoIncrement`` gives each new block the next stage (from 1) and, without ``ipu_id``,
  the IPU of that number.

The phased strategies (``ParallelPhasedExecution``, ``SerialPhasedExecution``) are accepted and placed like
pipelines; the emulator runs phases one after another, as it runs stages.
"""

from __future__ import annotations

from typing import Any

from .enums import AutoStage, Liveness

__all__ = [
    "ParallelPhasedExecution",
    "Phase",
    "PipelinedExecution",
    "SerialPhasedExecution",
    "ShardedExecution",
    "Stage",
    "StageManager",
]


class Stage:
    """One or more blocks (by ``user_id``) that run on one IPU.

    Example:
        >>> stage = Stage("encoder", "decoder").ipu(1)
        >>> stage.blocks
        ('encoder', 'decoder')
    """

    def __init__(self, *block_ids: str) -> None:
        assert all(isinstance(b, str) for b in block_ids), f"Block IDs are supposed to be strings but got {block_ids}"
        self._blocks = block_ids
        self._stage_id = -1
        self._phase_id = -1
        self._ipu: int | None = None

    @property
    def blocks(self) -> tuple[str, ...]:
        """The blocks this stage is made of."""
        return tuple(self._blocks)

    def ipu(self, ipu: int) -> Stage:
        """Run this stage on IPU ``ipu``."""
        assert isinstance(ipu, int)
        self._ipu = ipu
        return self


class StageManager:
    """Assigns a stage and an IPU to each block as tracing meets it (one manager per trace)."""

    def __init__(self, block_map: dict[str, Stage], auto_stage: AutoStage) -> None:
        self._block_map = block_map
        self._auto_stage = auto_stage
        self._auto_blocks: dict[str, Stage] = {}
        self._next_stage = 1
        self._next_auto_id = 0

    def begin(self, user_id: str | None, ipu_id: int | None) -> tuple[str, int, int]:
        """The block's name, stage and IPU.

        Raises:
            AssertionError: For a block no explicit stage names, or one without ``ipu_id`` under ``SameAsIpu``.
        """
        if user_id is None:
            user_id = str(self._next_auto_id)
            self._next_auto_id += 1
        stage = self._stage(user_id, ipu_id)
        ipu = stage._ipu if stage._ipu is not None else ipu_id
        return user_id, stage._stage_id, stage._stage_id if ipu is None else ipu

    def reset_auto_id(self) -> None:
        """Number blocks without ``user_id`` from ``"0"`` again."""
        self._next_auto_id = 0

    def _stage(self, user_id: str, ipu_id: int | None) -> Stage:
        if self._block_map:
            assert user_id in self._block_map, (
                f"Unknown Block '{user_id}' list of expected Blocks: {list(self._block_map.keys())}"
            )
            return self._block_map[user_id]
        if user_id not in self._auto_blocks:
            stage = Stage(user_id)
            if self._auto_stage == AutoStage.SameAsIpu:
                assert ipu_id is not None, (
                    f"poptorch.AutoStage.SameAsIpu was selected but no IPU was specified for block {user_id}"
                )
                stage._stage_id = ipu_id
            else:
                stage._stage_id = self._next_stage
                self._next_stage += 1
            self._auto_blocks[user_id] = stage
        return self._auto_blocks[user_id]


def _add(block_map: dict[str, Stage], stage: Stage) -> None:
    for block in stage.blocks:
        assert block not in block_map, f"{block} associated with more than one stage"
        block_map[block] = stage


class PipelinedExecution:
    """Run the stages as a pipeline (poptorch's default for models with blocks).

    Takes one ``AutoStage``, or stages: ``Stage`` objects, block ids (one stage each) or lists of block ids (one
    stage of several blocks).

    Example:
        >>> strategy = PipelinedExecution("A", ["B", "C"], Stage("D").ipu(0))
        >>> strategy.stage("C").blocks
        ('B', 'C')
    """

    def __init__(self, *args: Stage | str | list[str] | AutoStage) -> None:
        self.auto_stage = AutoStage.SameAsIpu
        self._block_map: dict[str, Stage] = {}
        if len(args) == 1 and isinstance(args[0], AutoStage):
            self.auto_stage = args[0]
            return
        for stage_id, arg in enumerate(args):
            if isinstance(arg, Stage):
                stage = arg
            elif isinstance(arg, str):
                stage = Stage(arg)
            else:
                assert all(isinstance(elt, str) for elt in arg)  # type: ignore[union-attr]
                stage = Stage(*arg)  # type: ignore[misc]
            stage._stage_id = stage_id
            _add(self._block_map, stage)

    def stage(self, block_id: str) -> Stage:
        """The stage ``block_id`` belongs to."""
        assert block_id in self._block_map, f"Unknown block {block_id}"
        return self._block_map[block_id]

    def onStartTracing(self) -> None:
        """Called by poptorch when tracing starts (the emulator's manager is made per trace)."""

    def onEndTracing(self) -> None:
        """Called by poptorch when tracing ends."""

    def stage_manager(self) -> StageManager:
        """A fresh manager for one trace."""
        return StageManager(self._block_map, self.auto_stage)

    @property
    def pipelined(self) -> bool:
        """Whether stages run concurrently as a pipeline (which sets the micro-batch requirements)."""
        return True

    def backendOptions(self) -> dict[str, Any]:
        """The backend options of this strategy."""
        return {"execution_mode": 0}


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

    def backendOptions(self) -> dict[str, Any]:
        """The backend options of this strategy."""
        return {"execution_mode": 1}


class Phase:
    """Stages that run in parallel within one phase of a phased execution.

    Example:
        >>> Phase("A", "B").stages[0].blocks
        ('A', 'B')
    """

    def __init__(self, *arg: str | Stage) -> None:
        if all(isinstance(elt, Stage) for elt in arg):
            self.stages: list[Stage] = list(arg)  # type: ignore[arg-type]
        else:
            assert all(isinstance(elt, str) for elt in arg), (
                f"All arguments must either be block IDs (strings) or Stages: {[type(elt) for elt in arg]}"
            )
            self.stages = [Stage(*arg)]  # type: ignore[arg-type]

    def stage(self, idx: int) -> Stage:
        """The ``idx``-th stage."""
        return self.stages[idx]

    def ipus(self, *ipus: int) -> None:
        """Give each stage of the phase an IPU."""
        assert len(ipus) == len(self.stages), (
            f"Phase contains {len(self.stages)} stages but you provided {len(ipus)} ipus"
        )
        for stage, ipu in zip(self.stages, ipus):
            stage.ipu(ipu)


class _PhasedExecution(PipelinedExecution):
    def __init__(self, *phases: Phase | list[Stage] | list[str] | Stage | str) -> None:
        assert phases, "There is currently no AutoStage for PhasedExecution, please explicitly specify the phases"
        super().__init__()
        self._tensors_liveness = Liveness.AlwaysLive
        self._separate_backward_phase = False
        self._phases: list[Phase] = []
        for phase_id, args in enumerate(phases):
            phase = args if isinstance(args, Phase) else Phase(*(args if isinstance(args, list) else [args]))
            self._phases.append(phase)
            for stage in phase.stages:
                stage._phase_id = phase_id
                if stage._stage_id < 0:
                    stage._stage_id = phase_id
                _add(self._block_map, stage)

    def phase(self, phase: int) -> Phase:
        """The ``phase``-th phase."""
        assert isinstance(phase, int) and phase >= 0, "Phases are identified by positive integers"
        return self._phases[phase]

    def useSeparateBackwardPhase(self, use: bool = True) -> _PhasedExecution:
        """Run the backward pass in phases of its own."""
        assert isinstance(use, bool)
        self._separate_backward_phase = use
        return self

    @property
    def pipelined(self) -> bool:
        """Phases run one after another."""
        return False

    def backendOptions(self) -> dict[str, Any]:
        """The backend options of this strategy."""
        return {
            "execution_mode": 2,
            "separate_backward_phase": self._separate_backward_phase,
            "tensors_liveness": self._tensors_liveness.value,
        }


class ParallelPhasedExecution(_PhasedExecution):
    """Phases alternate between two groups of IPUs.

    Example:
        >>> ParallelPhasedExecution(Phase("A"), Phase("B")).phase(1).stages[0].blocks
        ('B',)
    """

    def sendTensorsOffChipAfterFwd(self, off_chip: bool = True) -> ParallelPhasedExecution:
        """Send tensors off chip after the forward pass."""
        assert isinstance(off_chip, bool)
        self._tensors_liveness = Liveness.OffChipAfterFwd if off_chip else Liveness.AlwaysLive
        return self

    def backendOptions(self) -> dict[str, Any]:
        """The backend options of this strategy."""
        return {**super().backendOptions(), "serial_phases_execution": False}


class SerialPhasedExecution(_PhasedExecution):
    """Every phase runs on the same group of IPUs, one after another.

    Example:
        >>> strategy = SerialPhasedExecution(["A"], ["B"]).setTensorsLiveness(Liveness.OffChipAfterEachPhase)
        >>> strategy.phase(1).stages[0].blocks
        ('B',)
    """

    def setTensorsLiveness(self, liveness: Liveness) -> SerialPhasedExecution:
        """When tensors leave the chip between phases."""
        assert isinstance(liveness, Liveness)
        self._tensors_liveness = liveness
        return self

    def backendOptions(self) -> dict[str, Any]:
        """The backend options of this strategy."""
        return {**super().backendOptions(), "serial_phases_execution": True}
