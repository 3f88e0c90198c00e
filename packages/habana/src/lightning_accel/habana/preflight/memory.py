"""Predicted device memory per rank, for each distributed strategy, from one HPU's measured training step.

The pre-flight run measures, on one (emulated) HPU, the bytes of the parameters, gradients and optimizer state, and
the peak of the device memory in use over a whole training step (``torch.hpu.max_memory_allocated``). What the peak
holds beyond those states is the step's working memory: the activations kept for the backward pass and the
temporaries of the forward, backward and optimizer passes. On the emulator it grows in proportion to the micro-batch
(measured: 6.13 MiB at 4 sequences, 12.26 MiB at 8, for the test model of ``test_preflight_memory.py``), so it is
scaled by the micro-batch asked.

Each strategy then keeps per rank (``N`` ranks; ``P``, ``G``, ``O``: parameters, gradients, optimizer state; ``W``:
the working memory):

- ``ddp``: ``P + G + O + W`` and DDP's gradient buckets, one more ``G`` (Lightning's DDP copies the gradients into its
  buckets: ``gradient_as_bucket_view`` is off).
- ``fsdp`` (FULL_SHARD, or FSDP2's ``fully_shard``, one unit per block of the model's largest ``nn.ModuleList``):
  ``(P + G + O) / N + W``, the root's parameters (those in no block, kept gathered by the root) and two blocks
  gathered at a time (one block's parameters and another's unsharded gradients, or the prefetched next block).
- ``fsdp2_tp``: as ``fsdp`` over ``N / tp`` data-parallel ranks, with the states and gathered blocks also split ``tp``
  ways; ``W`` is kept whole (the norms, residuals and the loss are not split by tensor parallelism).
- ``zero1`` / ``zero2`` / ``zero3``: DeepSpeed keeps an fp32 master copy of the parameters for its optimizer even in
  fp32 training, partitioned with the optimizer state: ``P + G / N + (M + O) / N + W`` for stages 1 and 2 (DeepSpeed's
  stage 1 also partitions the reduced gradients), ``(P + G + M + O) / N + W`` plus the gathered blocks for stage 3;
  ``M`` is the parameters' count in float32.
- ``*_offload``: the master copy and the optimizer state live on the host (``offload_optimizer``); stage 3 also keeps
  its parameter partitions there (``offload_param``), gathering blocks onto the device as it goes.

Checked on the emulator against measured peaks (``test_preflight_memory.py``): ``ddp`` and ``fsdp`` (FSDP2) on two
emulated HPUs. The ZeRO figures follow the partitioning above and DeepSpeed's own state accounting
(``benchmarks/results/zero_memory.md``); they are not compared with a measured device peak, and none of the figures
include a real HPU's allocator pool, graph compiler workspace or HCCL buffers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .report import Finding, Report

__all__ = [
    "DEVICES",
    "STRATEGIES",
    "MemoryProfile",
    "add_memory_findings",
    "largest_batch",
    "predict",
]

_GIB = 2**30
_MIB = 2**20

#: The Gaudi generations predictions are made against, with their device memory (what the emulator gives each).
DEVICES = {"Gaudi2": 96 * _GIB, "Gaudi3": 128 * _GIB}

#: The strategies the report predicts, with the names it shows.
STRATEGIES = {
    "ddp": "DDP",
    "fsdp": "FSDP (full shard)",
    "fsdp2_tp": "FSDP2 + TP",
    "zero1": "ZeRO-1",
    "zero1_offload": "ZeRO-1 + offload",
    "zero2": "ZeRO-2",
    "zero2_offload": "ZeRO-2 + offload",
    "zero3": "ZeRO-3",
    "zero3_offload": "ZeRO-3 + offload",
}


@dataclass(frozen=True)
class MemoryProfile:
    """What one HPU's training step held, in bytes, at one micro-batch size.

    Attributes:
        parameters: The model's parameters.
        gradients: Their gradients (the trainable parameters').
        optimizer_state: The optimizer's state after its step (Adam's moments...).
        peak: The device memory's peak over one whole training step.
        batch_size: The micro-batch of that step (the first dimension of its first tensor).
        parameter_count: The number of parameters (for DeepSpeed's float32 master copy).
        root_parameters: Bytes of the parameters in no block (see :attr:`block_parameters`).
        block_parameters: Bytes of the largest block: an element of the model's largest ``nn.ModuleList``, the unit
            FSDP and ZeRO-3 gather at a time; the whole model when it has none.

    Example:
        >>> p = MemoryProfile(10, 10, 20, 46, 4, 2, 2, 2)
        >>> p.working
        6
    """

    parameters: int
    gradients: int
    optimizer_state: int
    peak: int
    batch_size: int
    parameter_count: int
    root_parameters: int
    block_parameters: int

    @property
    def states(self) -> int:
        """Parameters, gradients and optimizer state together."""
        return self.parameters + self.gradients + self.optimizer_state

    @property
    def working(self) -> int:
        """The step's peak beyond the states: activations and temporaries, at :attr:`batch_size`."""
        return max(self.peak - self.states, 0)

    def as_dict(self) -> dict[str, int]:
        """The profile as plain data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryProfile:
        """Rebuild a profile from :meth:`as_dict`'s output."""
        return cls(**{key: int(data[key]) for key in cls.__dataclass_fields__})


def _check(strategy: str, world_size: int, tp_size: int) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}: not a predicted strategy. Accepted: {', '.join(STRATEGIES)}.")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r}: must be a positive int (HPUs in the run, e.g. 8).")
    if not isinstance(tp_size, int) or tp_size < 1 or world_size % tp_size:
        raise ValueError(
            f"tp_size={tp_size!r}: must be a positive int dividing world_size={world_size} (e.g. 2 for 8 HPUs)."
        )


def _fixed(profile: MemoryProfile, strategy: str, world_size: int, tp_size: int) -> float:
    """Bytes per rank that do not depend on the micro-batch."""
    n = world_size
    p, g, o = profile.parameters, profile.gradients, profile.optimizer_state
    master = 4 * profile.parameter_count
    gathered = profile.root_parameters + 2 * profile.block_parameters
    if strategy == "ddp":
        return p + 2 * g + o
    if strategy == "fsdp":
        return (p + g + o) / n + gathered
    if strategy == "fsdp2_tp":
        return (p + g + o) / n + gathered / tp_size
    if strategy == "zero1" or strategy == "zero2":
        return p + g / n + (master + o) / n
    if strategy == "zero1_offload" or strategy == "zero2_offload":
        return p + g / n
    if strategy == "zero3":
        return (p + g + master + o) / n + gathered
    # zero3_offload: parameters, master copy and optimizer state on the host; blocks gathered onto the device.
    return g / n + gathered


def predict(
    profile: MemoryProfile, strategy: str, world_size: int, batch_size: int | None = None, tp_size: int = 1
) -> int:
    """Predicted peak device memory per rank, in bytes, of ``strategy`` on ``world_size`` HPUs.

    Args:
        profile: One HPU's measured step.
        strategy: One of :data:`STRATEGIES`.
        world_size: HPUs in the run.
        batch_size: The micro-batch per rank (default: the profile's).
        tp_size: Tensor-parallel ranks, for ``fsdp2_tp``.

    Raises:
        ValueError: For an unknown strategy, or sizes that are not positive ints.

    Example:
        >>> p = MemoryProfile(10, 10, 20, 46, 4, 2, 2, 2)
        >>> predict(p, "ddp", 2)
        56
    """
    _check(strategy, world_size, tp_size)
    batch = profile.batch_size if batch_size is None else batch_size
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch_size={batch!r}: must be a positive int (the micro-batch per rank).")
    working = profile.working * batch / profile.batch_size
    return round(_fixed(profile, strategy, world_size, tp_size) + working)


def largest_batch(profile: MemoryProfile, strategy: str, world_size: int, capacity: int, tp_size: int = 1) -> int:
    """The largest micro-batch per rank whose predicted peak fits ``capacity`` bytes (0: not even one sample)."""
    _check(strategy, world_size, tp_size)
    room = capacity - _fixed(profile, strategy, world_size, tp_size)
    if room <= 0:
        return 0
    per_sample = profile.working / profile.batch_size
    if per_sample <= 0:
        raise ValueError("The measured step held no working memory: its micro-batch cannot be scaled.")
    return int(room // per_sample)


def _size(value: float) -> str:
    return f"{value / _GIB:.2f} GiB" if value >= _GIB else f"{value / _MIB:.2f} MiB"


def add_memory_findings(
    report: Report,
    strategies: Sequence[str] = tuple(STRATEGIES),
    world_size: int = 8,
    batch_size: int | None = None,
    tp_size: int = 2,
) -> None:
    """Add one ``memory`` finding per strategy to ``report``, from the memory profile of its first mode that has one.

    Raises:
        ValueError: For an unknown strategy or bad sizes, naming the value and what is accepted.
    """
    for strategy in strategies:
        _check(strategy, world_size, tp_size if strategy == "fsdp2_tp" else 1)
    found = next(((m, f["memory"]) for m, f in report.modes.items() if isinstance(f.get("memory"), dict)), None)
    if found is None or not strategies:
        return
    mode, data = found
    profile = MemoryProfile.from_dict(data)
    batch = profile.batch_size if batch_size is None else batch_size
    for strategy in strategies:
        tp = tp_size if strategy == "fsdp2_tp" else 1
        need = predict(profile, strategy, world_size, batch, tp)
        largest = {name: largest_batch(profile, strategy, world_size, cap, tp) for name, cap in DEVICES.items()}
        fits = {name: need <= cap for name, cap in DEVICES.items()}
        layout = f"{world_size} HPUs" + (f", tensor parallel {tp}" if tp > 1 else "")
        verdict = "; ".join(
            f"{'fits' if fits[name] else 'does NOT fit'} {name} ({_size(cap)}), largest micro-batch {largest[name]}"
            for name, cap in DEVICES.items()
        )
        if all(fits.values()):
            fix = "Nothing to change; a larger micro-batch fits up to the largest shown."
        else:
            fix = (
                f"Use a micro-batch of at most {max(largest.values())} with gradient accumulation, or a strategy "
                "that shards more (FSDP, ZeRO-3, offload) or more HPUs; activation checkpointing shrinks the "
                "per-sample part."
            )
        report.findings.append(
            Finding(
                "memory",
                mode,
                f"{STRATEGIES[strategy]} on {layout}: {_size(need)} per rank at micro-batch {batch}: {verdict}",
                "",
                "Predicted from one emulated HPU's step (states plus the step's peak working memory, scaled by the "
                "micro-batch); a real HPU adds its allocator pool, graph workspace and HCCL buffers.",
                fix,
                1,
                {
                    "strategy": strategy,
                    "world_size": world_size,
                    "tp_size": tp,
                    "batch_size": batch,
                    "bytes_per_rank": need,
                    "fits": fits,
                    "largest_batch": largest,
                },
            )
        )
