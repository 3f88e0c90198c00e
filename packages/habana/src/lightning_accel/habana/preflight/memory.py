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
- ``zero1`` / ``zero2`` / ``zero3``: what DeepSpeed allocates with the run's ZeRO settings (``deepspeed_config``;
  default: HPUDeepSpeedStrategy's arguments). ``M`` is its float32 master copy of the parameters, kept even in fp32
  training and partitioned with the optimizer state; ``B`` its gradient bucket (``reduce_bucket_size`` elements,
  allocated only with ``contiguous_gradients``; stages 1 and 2 take two with ``overlap_comm``); ``L`` the largest
  parameter. The peak is the larger of two phases on top of what stays between steps:

  - stages 1 and 2 keep ``P + (M + O) / N`` (the parameters live in one flat buffer); the forward and backward pass
    add the reduced gradient partition ``G / N``, the buckets, the gradient autograd just produced (at most ``L``)
    and ``W``; the optimizer step adds ``G / N`` and two temporaries the size of the master partition (torch's
    Adam/AdamW over DeepSpeed's one flat tensor: ``sqrt`` and the division);
  - stage 3 keeps ``(P + G + M + O) / N + B``; the forward and backward pass add the gathered parameters (all of
    them up to ``stage3_max_live_parameters``) and the flat buffer of the gather in flight (up to
    ``stage3_prefetch_bucket_size``: the gathered copies and that buffer live together), and ``W``; the step adds as
    for stages 1 and 2. Parameters under ``stage3_param_persistence_threshold`` (kept whole) are left out.
- ``*_offload``: the master copy, the optimizer state and its step live on the host (``offload_optimizer``); stages
  1 and 2 keep ``P`` and a device buffer of ``L`` for the copies to the host, stage 3 also keeps its parameter and
  gradient partitions there (``offload_param``) and only ``B`` on the device.
- Under DeepSpeed's ``bf16`` or ``fp16`` (the config's section enabled, or, without those sections, a profile
  measured at a 16-bit Lightning precision, from which Lightning's DeepSpeed strategy enables them), DeepSpeed
  converts the model: ``P``, ``G``, ``L``, the buckets and the gathered parameters are 16-bit, while ``M``, ``O`` and
  the step's gradient partition stay float32. ``W`` follows the model's dtype when the profile was measured without
  autocast (``32-true``: halved; ``bf16-true``: as measured). A profile measured under autocast (``bf16-mixed``)
  keeps its ``W`` as measured, which also counts autocast's 16-bit copies of the weights that DeepSpeed's 16-bit
  model does not make: profile with ``bf16-true`` for the exact figure.

Checked on the emulator against measured peaks: ``ddp`` and ``fsdp`` (FSDP2) on two emulated HPUs
(``packages/habana/tests/test_preflight_memory.py``), and every ZeRO row with HPUDeepSpeedStrategy on two emulated
HPUs (``packages/deepspeed-hpu/tests/test_preflight_zero_memory.py``). None of the figures include a real HPU's
allocator pool, graph compiler workspace or HCCL buffers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .report import Finding, Report

__all__ = [
    "DEVICES",
    "ZERO_SETTINGS",
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


#: The DeepSpeed ``zero_optimization`` settings the ZeRO predictions read, with the values HPUDeepSpeedStrategy's
#: arguments give them (the prediction's default). A ``deepspeed_config`` that leaves one out gets DeepSpeed's own.
ZERO_SETTINGS: dict[str, int | bool] = {
    "reduce_bucket_size": 200_000_000,
    "overlap_comm": True,
    "contiguous_gradients": True,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_max_live_parameters": 1_000_000_000,
}
# DeepSpeed's defaults (deepspeed/runtime/zero/config.py); its overlap_comm defaults to on for stage 3 only.
_DEEPSPEED_DEFAULTS: dict[str, int | bool | None] = {
    "reduce_bucket_size": 500_000_000,
    "overlap_comm": None,
    "contiguous_gradients": True,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_max_live_parameters": 1_000_000_000,
}


def load_deepspeed_config(
    value: Mapping[str, Any] | str | os.PathLike[str] | None, argument: str = "deepspeed_config"
) -> Mapping[str, Any] | None:
    """The DeepSpeed config ``value`` names: a dict as it is, or the path of a JSON file (as ``ds_config.json``).

    What Lightning's ``DeepSpeedStrategy(config=...)`` takes, so that the prediction reads the run's own file. Its
    ZeRO settings are checked here, before any step runs.

    Raises:
        ValueError: For a file that cannot be read as a JSON object, or a bad ZeRO setting, naming ``argument``.
    """
    if value is None or isinstance(value, Mapping):
        config = value
    elif isinstance(value, (str, os.PathLike)):
        try:
            config = json.loads(Path(value).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(
                f"{argument}={os.fspath(value)!r}: cannot read it as a DeepSpeed config (JSON): {exc}. Accepted: the "
                "path of the JSON file the run passes as HPUDeepSpeedStrategy(config=...), or a dict."
            ) from None
        if not isinstance(config, dict):
            raise ValueError(f"{argument}={os.fspath(value)!r}: holds {type(config).__name__}, not a JSON object.")
    else:
        raise ValueError(
            f"{argument}={value!r}: accepted a DeepSpeed config dict, the path of its JSON file, or None for "
            "HPUDeepSpeedStrategy's defaults."
        )
    for stage in (1, 3):  # stage 3 reads every setting the others read, and overlap_comm's default differs
        _zero_settings(config, stage)
    _half_enabled(config)
    return config


def _zero_settings(deepspeed_config: Mapping[str, Any] | None, stage: int) -> dict[str, int | bool]:
    """The ZeRO settings of ``deepspeed_config`` (a DeepSpeed config dict) that the prediction reads."""
    if deepspeed_config is None:
        return dict(ZERO_SETTINGS)
    if not isinstance(deepspeed_config, Mapping):
        raise ValueError(
            f"deepspeed_config={deepspeed_config!r}: must be a DeepSpeed config dict (the one the run passes as "
            "HPUDeepSpeedStrategy(config=...)), or None for HPUDeepSpeedStrategy's defaults."
        )
    section = deepspeed_config.get("zero_optimization", {})
    if not isinstance(section, Mapping):
        raise ValueError(
            f"deepspeed_config['zero_optimization']={section!r}: must be a dict of ZeRO settings, "
            "e.g. {'stage': 2, 'reduce_bucket_size': 200000000}."
        )
    settings: dict[str, int | bool] = {}
    for key, default in _DEEPSPEED_DEFAULTS.items():
        value = section.get(key, default)
        if key == "overlap_comm" and value is None:
            value = stage == 3
        if isinstance(default, bool) or key == "overlap_comm":
            if not isinstance(value, bool):
                raise ValueError(f"deepspeed_config['zero_optimization'][{key!r}]={value!r}: must be true or false.")
        elif value == "auto":
            raise ValueError(
                f"deepspeed_config['zero_optimization'][{key!r}]='auto': transformers' Trainer fills \"auto\" from the "
                "model's hidden_size, and neither DeepSpeed nor Lightning does. Give the number of elements the run "
                "uses (transformers' choice for reduce_bucket_size is hidden_size * hidden_size)."
            )
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(
                f"deepspeed_config['zero_optimization'][{key!r}]={value!r}: must be a number of elements >= 0 "
                f"(DeepSpeed's default: {default:.0e})."
            )
        settings[key] = value if isinstance(value, bool) else int(value)
    return settings


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
            FSDP gathers at a time; the whole model when it has none.
        largest_parameter: Bytes of the largest parameter (DeepSpeed sizes some buffers by it); 0 in profiles made
            before it was recorded, read then as :attr:`block_parameters`.
        precision: Lightning's precision of the measured step (``"32-true"``, ``"bf16-mixed"``...); ``"32-true"`` in
            profiles made before it was recorded.

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
    largest_parameter: int = 0
    precision: str = "32-true"

    @property
    def states(self) -> int:
        """Parameters, gradients and optimizer state together."""
        return self.parameters + self.gradients + self.optimizer_state

    @property
    def working(self) -> int:
        """The step's peak beyond the states: activations and temporaries, at :attr:`batch_size`."""
        return max(self.peak - self.states, 0)

    def as_dict(self) -> dict[str, int | str]:
        """The profile as plain data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryProfile:
        """Rebuild a profile from :meth:`as_dict`'s output."""
        # Reports written before largest_parameter and precision were recorded lack them: they keep their defaults.
        optional = {"largest_parameter", "precision"}
        values: dict[str, Any] = {}
        for key in cls.__dataclass_fields__:
            if key in data or key not in optional:
                values[key] = str(data[key]) if key == "precision" else int(data[key])
        return cls(**values)


def _check(strategy: str, world_size: int, tp_size: int) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}: not a predicted strategy. Accepted: {', '.join(STRATEGIES)}.")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r}: must be a positive int (HPUs in the run, e.g. 8).")
    if not isinstance(tp_size, int) or tp_size < 1 or world_size % tp_size:
        raise ValueError(
            f"tp_size={tp_size!r}: must be a positive int dividing world_size={world_size} (e.g. 2 for 8 HPUs)."
        )


_HALF_PRECISIONS = ("bf16-mixed", "bf16-true", "16-mixed", "16-true", "bf16", "16")


def _half_enabled(deepspeed_config: Mapping[str, Any] | None) -> bool | None:
    """Whether the config's ``bf16`` or ``fp16`` section is enabled; ``None`` when it has neither section."""
    sections = {key: (deepspeed_config or {})[key] for key in ("bf16", "fp16") if key in (deepspeed_config or {})}
    for key, section in sections.items():
        if not isinstance(section, Mapping) or not isinstance(section.get("enabled", False), bool):
            raise ValueError(
                f"deepspeed_config[{key!r}]={section!r}: must be a dict whose 'enabled' is true or false, e.g. "
                f"{{'enabled': True}}."
            )
    return any(section.get("enabled", False) for section in sections.values()) if sections else None


def _deepspeed_element(profile: MemoryProfile, deepspeed_config: Mapping[str, Any] | None) -> int:
    """Bytes per element of the parameters DeepSpeed trains: 2 under its ``bf16`` or ``fp16``, else 4."""
    enabled = _half_enabled(deepspeed_config)
    if enabled is None:
        # Without those sections, Lightning's DeepSpeed strategy enables one from the Trainer's 16-bit precision.
        enabled = profile.precision in _HALF_PRECISIONS
    return 2 if enabled else 4


def _parts(
    profile: MemoryProfile, strategy: str, world_size: int, tp_size: int, deepspeed_config: Mapping[str, Any] | None
) -> tuple[float, float, float, float]:
    """Bytes per rank as ``(kept, with_work, step, w)``: the peak is ``kept + max(with_work + w * W, step)``.

    ``kept`` stays between steps; ``with_work`` is what the forward and backward pass add besides the working memory
    ``W`` (which scales with the micro-batch, and by ``w`` to the dtype the strategy trains in), ``step`` what the
    optimizer step adds.
    """
    n = world_size
    p, g, o = float(profile.parameters), float(profile.gradients), float(profile.optimizer_state)
    gathered = profile.root_parameters + 2 * profile.block_parameters
    if strategy == "ddp":
        return p + 2 * g + o, 0.0, 0.0, 1.0
    if strategy == "fsdp":
        return (p + g + o) / n + gathered, 0.0, 0.0, 1.0
    if strategy == "fsdp2_tp":
        return (p + g + o) / n + gathered / tp_size, 0.0, 0.0, 1.0
    stage = int(strategy[len("zero")])
    zero = _zero_settings(deepspeed_config, stage)
    measured = p / max(profile.parameter_count, 1)  # bytes per element of the profile's parameters
    element = _deepspeed_element(profile, deepspeed_config)
    # DeepSpeed converts the model to its 16-bit dtype, and keeps float32 for the master copy, the optimizer state
    # (torch's optimizers keep their state in the parameters' dtype: the master's) and the step's gradients.
    scale, fp32 = element / measured, 4 / measured
    master = 4 * profile.parameter_count
    step = g * fp32 / n + 2 * master / n  # the float32 gradient partition and the two temporaries of Adam's step
    p, g, o = p * scale, g * scale, o * fp32
    block = profile.block_parameters * scale
    largest = (profile.largest_parameter or profile.block_parameters) * scale
    working = 1.0 if profile.precision.endswith("-mixed") else scale
    buckets = 2 if zero["overlap_comm"] and stage < 3 else 1
    bucket = buckets * int(zero["reduce_bucket_size"]) * element if zero["contiguous_gradients"] else 0.0
    if strategy in ("zero1", "zero2"):
        return p + (master + o) / n, g / n + bucket + largest, step, working
    if strategy in ("zero1_offload", "zero2_offload"):
        return p + largest, bucket + largest, 0.0, working
    live = min(p, max(block, element * int(zero["stage3_max_live_parameters"])))
    in_flight = min(p, max(block, element * int(zero["stage3_prefetch_bucket_size"])))
    if strategy == "zero3":
        return (p + g + master + o) / n + bucket, live + in_flight, step, working
    # zero3_offload: parameter and gradient partitions, master copy and optimizer state on the host.
    return bucket, live + in_flight, 0.0, working


def predict(
    profile: MemoryProfile,
    strategy: str,
    world_size: int,
    batch_size: int | None = None,
    tp_size: int = 1,
    deepspeed_config: Mapping[str, Any] | None = None,
) -> int:
    """Predicted peak device memory per rank, in bytes, of ``strategy`` on ``world_size`` HPUs.

    Args:
        profile: One HPU's measured step.
        strategy: One of :data:`STRATEGIES`.
        world_size: HPUs in the run.
        batch_size: The micro-batch per rank (default: the profile's).
        tp_size: Tensor-parallel ranks, for ``fsdp2_tp``.
        deepspeed_config: For the ZeRO strategies, the run's DeepSpeed config (its ``zero_optimization`` settings
            of :data:`ZERO_SETTINGS` are read; those left out take DeepSpeed's defaults); ``None``: the defaults of
            HPUDeepSpeedStrategy's arguments.

    Raises:
        ValueError: For an unknown strategy, sizes that are not positive ints, or a bad ZeRO setting.

    Example:
        >>> p = MemoryProfile(10, 10, 20, 46, 4, 2, 2, 2)
        >>> predict(p, "ddp", 2)
        56
    """
    _check(strategy, world_size, tp_size)
    batch = profile.batch_size if batch_size is None else batch_size
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch_size={batch!r}: must be a positive int (the micro-batch per rank).")
    kept, with_work, step, scale = _parts(profile, strategy, world_size, tp_size, deepspeed_config)
    working = profile.working * scale * batch / profile.batch_size
    return round(kept + max(with_work + working, step))


def largest_batch(
    profile: MemoryProfile,
    strategy: str,
    world_size: int,
    capacity: int,
    tp_size: int = 1,
    deepspeed_config: Mapping[str, Any] | None = None,
) -> int:
    """The largest micro-batch per rank whose predicted peak fits ``capacity`` bytes (0: not even one sample)."""
    _check(strategy, world_size, tp_size)
    kept, with_work, step, scale = _parts(profile, strategy, world_size, tp_size, deepspeed_config)
    room = capacity - kept - with_work
    if room <= 0 or kept + step > capacity:
        return 0
    per_sample = profile.working * scale / profile.batch_size
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
    deepspeed_config: Mapping[str, Any] | None = None,
) -> None:
    """Add one ``memory`` finding per strategy to ``report``, from the memory profile of its first mode that has one.

    ``deepspeed_config`` is the ZeRO rows' DeepSpeed config (see :func:`predict`).

    Raises:
        ValueError: For an unknown strategy, bad sizes or a bad ZeRO setting, naming the value and what is accepted.
    """
    for strategy in strategies:
        _check(strategy, world_size, tp_size if strategy == "fsdp2_tp" else 1)
        if strategy.startswith("zero"):
            _zero_settings(deepspeed_config, int(strategy[len("zero")]))
    found = next(((m, f["memory"]) for m, f in report.modes.items() if isinstance(f.get("memory"), dict)), None)
    if found is None or not strategies:
        return
    mode, data = found
    profile = MemoryProfile.from_dict(data)
    batch = profile.batch_size if batch_size is None else batch_size
    for strategy in strategies:
        tp = tp_size if strategy == "fsdp2_tp" else 1
        need = predict(profile, strategy, world_size, batch, tp, deepspeed_config)
        largest = {
            name: largest_batch(profile, strategy, world_size, cap, tp, deepspeed_config)
            for name, cap in DEVICES.items()
        }
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
                    **(
                        {"zero_settings": _zero_settings(deepspeed_config, int(strategy[len("zero")]))}
                        if strategy.startswith("zero")
                        else {}
                    ),
                    "fits": fits,
                    "largest_batch": largest,
                },
            )
        )
