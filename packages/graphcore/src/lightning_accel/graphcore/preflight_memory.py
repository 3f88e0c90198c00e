"""Per-IPU memory of a model as poptorch would place it, and where to put ``poptorch.BeginBlock`` to balance it.

An estimate made on the host without Poplar: one training step (forward and backward) of one micro-batch runs on the
CPU, and the bytes it keeps are added up per IPU:

- **weights**: each parameter on the IPU of the block where it is first used (int64/float64 counted at 4 bytes:
  poptorch narrows them);
- **gradients**: one more copy of the weights (PopART's gradient accumulator with gradient accumulation, the
  gradients of the backward pass otherwise);
- **optimizer state**: PopART's accumulators per weight: none for plain SGD, one for SGD with momentum (``Accl1``),
  two for Adam, AdamW and LAMB (``Accl1``, ``Accl2``), one to three for RMSprop;
- **activations**: the tensors autograd saves for the backward pass, in the block that made them; with pipelining
  (poptorch's default on several IPUs), PopART stashes them for ``2 * (stages after this one) + 1`` micro-batches
  (its ``pipeline.cpp``: "a stash size of 2*(IPUs to end) + 1"), the last stage keeping one.

The sum is compared with the IPU's In-Processor-Memory (Mk2 GC200 and Bow: 1472 tiles of 624 KiB, "900 MB"). Poplar's
code, exchange buffers, temporaries of matrix products and how tensors spread over tiles are not counted: a stage that
fits here may still not fit on the IPU, and one that does not fit here will not fit there.

Example:
    >>> import torch
    >>> from lightning_accel.graphcore.preflight_memory import ipu_memory
    >>> [stage.ipu for stage in ipu_memory(torch.nn.Linear(4, 2), torch.randn(3, 4))]
    [0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

__all__ = [
    "IPU_MEMORY",
    "OPTIMIZER_SLOTS",
    "PipelineSplit",
    "StageMemory",
    "ipu_memory",
    "memory_findings",
    "optimizer_slots",
    "size",
    "suggest_split",
]

#: In-Processor-Memory per IPU, in bytes (tiles x SRAM per tile, from Graphcore's IPU datasheets).
IPU_MEMORY = {
    "gc200": 1472 * 624 * 1024,  # Mk2 GC200 (IPU-M2000, "900 MB")
    "bow": 1472 * 624 * 1024,  # Bow IPU: a GC200 die, same memory
    "gc2": 1216 * 256 * 1024,  # Mk1 GC2 ("300 MB")
}
#: PopART's optimizer accumulators per weight, by optimizer name.
OPTIMIZER_SLOTS = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2, "lamb": 2, "rmsprop": 1}
_MIB = 2**20


@dataclass
class StageMemory:
    """The estimated bytes one IPU keeps for one training step.

    Attributes:
        ipu: The IPU (``ipu_id``); with pipelining, also the stage.
        weights: Parameter bytes placed on it.
        gradients: One copy of its weights (accumulator or backward-pass gradients).
        optimizer: Optimizer state bytes.
        activations: Bytes saved for the backward pass by one micro-batch.
        stash: How many micro-batches' activations it keeps (PopART's pipeline stash).
        capacity: The IPU's In-Processor-Memory in bytes.
        blocks: The block indices placed on it, when known (the split suggestion).

    Example:
        >>> StageMemory(0, 100, 100, 0, 50, 1, 1000).total
        250
    """

    ipu: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    stash: int
    capacity: int
    blocks: tuple[int, ...] = ()

    @property
    def total(self) -> int:
        """All bytes estimated for this IPU."""
        return self.weights + self.gradients + self.optimizer + self.activations * self.stash

    @property
    def fits(self) -> bool:
        """Whether :attr:`total` is within :attr:`capacity`."""
        return self.total <= self.capacity

    def as_dict(self) -> dict[str, Any]:
        """The figures, and ``total`` and ``fits``, as plain values (for JSON)."""
        return {
            "ipu": self.ipu,
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "stash": self.stash,
            "total": self.total,
            "capacity": self.capacity,
            "fits": self.fits,
            "blocks": list(self.blocks),
        }


@dataclass
class PipelineSplit:
    """Where to start a ``poptorch.BeginBlock`` per IPU so that the largest IPU's memory is smallest.

    Attributes:
        blocks_path: The attribute path of the block list in the model (``"layers"``, ``"encoder.layer"``).
        starts: The first block index on each IPU (``starts[0] == 0``).
        stages: The estimated memory of each IPU with this split.

    Example:
        >>> split = PipelineSplit("layers", [0, 3], [])
        >>> split.code()
        ['poptorch.BeginBlock(model.layers[0], ipu_id=0)', 'poptorch.BeginBlock(model.layers[3], ipu_id=1)']
    """

    blocks_path: str
    starts: list[int]
    stages: list[StageMemory]

    def code(self) -> list[str]:
        """The ``BeginBlock`` lines that make this split."""
        return [
            f"poptorch.BeginBlock(model.{self.blocks_path}[{start}], ipu_id={ipu})"
            for ipu, start in enumerate(self.starts)
        ]


def optimizer_slots(optimizer: Any) -> int:
    """PopART's accumulators per weight for ``optimizer``: a name of :data:`OPTIMIZER_SLOTS` or an optimizer object.

    Raises:
        ValueError: For an unknown name or optimizer class, naming what is accepted.
    """
    if isinstance(optimizer, str):
        key = optimizer.lower()
        if key not in OPTIMIZER_SLOTS:
            raise ValueError(
                f"optimizer={optimizer!r}: accepted names are {', '.join(OPTIMIZER_SLOTS)}, or a torch/poptorch "
                "optimizer object."
            )
        return OPTIMIZER_SLOTS[key]
    name = type(optimizer).__name__.lower()
    groups = getattr(optimizer, "param_groups", None) or [{}]
    group = groups[0]
    if name == "sgd":
        return 1 if group.get("momentum", 0) else 0
    if name == "rmsprop":
        return 1 + bool(group.get("centered", False)) + bool(group.get("momentum", 0))
    if name in OPTIMIZER_SLOTS:
        return OPTIMIZER_SLOTS[name]
    raise ValueError(
        f"optimizer={type(optimizer).__name__}: poptorch 3.4 trains with SGD, Adam, AdamW, RMSprop or LAMB only; "
        f"pass one of those or a name ({', '.join(OPTIMIZER_SLOTS)})."
    )


def _nbytes(tensor: torch.Tensor) -> int:
    # The IPU has no 64-bit types: poptorch keeps int64/float64 as int32/float32.
    return tensor.numel() * min(tensor.element_size(), 4)


def _block_hooks(model: torch.nn.Module) -> dict[torch.nn.Module, int]:
    """The modules the user marked with ``poptorch.BeginBlock(module, ipu_id=...)``, with their IPU."""
    starts: dict[torch.nn.Module, int] = {}
    for module in model.modules():
        for hook in module._forward_pre_hooks.values():
            if type(hook).__name__ == "_BlockHook":
                # poptorch keeps it as ``_ipu_id``; a block without one stays on the previous block's IPU.
                ipu = getattr(hook, "_ipu_id", getattr(hook, "ipu_id", None))
                starts[module] = -1 if ipu is None else int(ipu)
    return starts


class _Units:
    """Runs one step on the host and adds up parameter and saved-activation bytes per unit (a block or an IPU)."""

    def __init__(self, starts: dict[torch.nn.Module, Any], first: Any, after: torch.nn.Module | None) -> None:
        self.starts = starts
        self.after = after
        self.current = first
        self.weights: dict[Any, int] = {}
        self.activations: dict[Any, int] = {}
        self.order: list[Any] = [first]
        self._placed: set = set()
        self._saved: set = set()
        self._params: set = set()
        self.calls: list[Any] = []

    def _enter(self, module: torch.nn.Module, inputs: Any) -> None:
        unit = self.starts.get(module)
        if unit is not None:
            self.calls.append(unit)
            if unit != -1:  # a BeginBlock without ipu_id keeps the current IPU
                self.current = unit
            if self.current not in self.order:
                self.order.append(self.current)
        for param in module.parameters(recurse=False):
            if id(param) not in self._placed:
                self._placed.add(id(param))
                self.weights[self.current] = self.weights.get(self.current, 0) + _nbytes(param)

    def _exit_module(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if module is self.after:
            self.current = "post"
            if "post" not in self.order:
                self.order.append("post")

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key not in self._saved and not isinstance(tensor, torch.nn.Parameter) and key[0] not in self._params:
            self._saved.add(key)
            self.activations[self.current] = self.activations.get(self.current, 0) + _nbytes(tensor)
        return tensor

    def run(self, step: torch.nn.Module, inputs: Sequence[Any]) -> None:
        self._params = {p.untyped_storage().data_ptr() for p in step.parameters()}
        grads = {p: p.grad for p in step.parameters()}
        handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._enter),
            torch.nn.modules.module.register_module_forward_hook(self._exit_module),
        ]
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor):
                out = step(*inputs)
            loss = out if isinstance(out, torch.Tensor) else None
            if loss is not None and loss.requires_grad:
                loss.sum().backward()
        finally:
            for handle in handles:
                handle.remove()
            for param, grad in grads.items():
                param.grad = grad  # the host step must leave the user's model as it was


def _step_module(model: torch.nn.Module) -> torch.nn.Module:
    from .preflight import _is_lightning, _TrainingStep

    return _TrainingStep(model) if _is_lightning(model) else model


def _capacity(device: str) -> int:
    if device not in IPU_MEMORY:
        raise ValueError(f"device={device!r}: accepted IPUs are {', '.join(IPU_MEMORY)} (GC200 is the Mk2 IPU).")
    return IPU_MEMORY[device]


def _check_accumulation(gradient_accumulation: int) -> None:
    if (
        isinstance(gradient_accumulation, bool)
        or not isinstance(gradient_accumulation, int)
        or gradient_accumulation < 1
    ):
        raise ValueError(f"gradient_accumulation={gradient_accumulation!r}: must be a positive int (1: none).")


def _stage_memory(
    ipu: int, weights: int, activations: int, stage: int, stages: int, slots: int, capacity: int
) -> StageMemory:
    stash = 2 * (stages - 1 - stage) + 1
    return StageMemory(ipu, weights, weights, slots * weights, activations, stash, capacity)


def ipu_memory(
    model: torch.nn.Module,
    *inputs: Any,
    optimizer: Any = "sgd",
    gradient_accumulation: int = 1,
    device: str = "gc200",
) -> list[StageMemory]:
    """The estimated memory of each IPU the model's ``BeginBlock`` annotations use (one IPU without any).

    Args:
        model: A ``torch.nn.Module`` or ``LightningModule`` (its ``training_step``), annotated or not.
        inputs: One micro-batch, on the host.
        optimizer: A name of :data:`OPTIMIZER_SLOTS` or an optimizer object.
        gradient_accumulation: poptorch's ``Training.gradientAccumulation``: with pipelining it must be at least the
            number of stages' ``2 * stages - 1``; it does not change the estimate (the accumulator is counted).
        device: A key of :data:`IPU_MEMORY`.

    Returns:
        One :class:`StageMemory` per IPU, in pipeline order.

    Raises:
        ValueError: For an unknown ``optimizer`` or ``device``, or a ``gradient_accumulation`` below 1.
    """
    capacity = _capacity(device)
    slots = optimizer_slots(optimizer)
    _check_accumulation(gradient_accumulation)
    units = _Units(_block_hooks(model), 0, None)
    units.run(_step_module(model), inputs)
    ipus = [unit for unit in units.order if unit != "post"]
    return [
        _stage_memory(ipu, units.weights.get(ipu, 0), units.activations.get(ipu, 0), index, len(ipus), slots, capacity)
        for index, ipu in enumerate(ipus)
    ]


def _find_blocks(model: torch.nn.Module, blocks: str | None) -> tuple[str, torch.nn.ModuleList]:
    lists = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m)}
    if blocks is not None:
        if blocks not in lists:
            raise ValueError(
                f"blocks={blocks!r}: not a non-empty nn.ModuleList of the model. Its ModuleLists: "
                f"{', '.join(sorted(lists)) or 'none'}."
            )
        return blocks, lists[blocks]
    if not lists:
        raise ValueError(
            f"{type(model).__name__} has no nn.ModuleList of layers to split; a pipeline split needs a model of "
            "sequential blocks (e.g. self.layers = nn.ModuleList([...])). Pass blocks='<attribute path>' if it has one."
        )
    name = max(lists, key=lambda key: (sum(p.numel() for p in lists[key].parameters()), len(lists[key])))
    return name, lists[name]


def suggest_split(
    model: torch.nn.Module,
    *inputs: Any,
    ipus: int,
    blocks: str | None = None,
    optimizer: Any = "sgd",
    device: str = "gc200",
) -> PipelineSplit:
    """Where to put ``poptorch.BeginBlock`` so that the most loaded of ``ipus`` IPUs holds the least memory.

    The blocks are the elements of an ``nn.ModuleList`` (``blocks``, else the model's largest), run in order; what
    runs before the first block (embeddings) goes with IPU 0, what runs after the last (the head, the loss) with the
    last IPU. Each IPU's memory counts its pipeline stash (earlier stages keep more micro-batches' activations).

    Args:
        model: A ``torch.nn.Module`` or ``LightningModule`` (its ``training_step``), without ``BeginBlock``.
        inputs: One micro-batch, on the host.
        ipus: How many IPUs to split over (at least 2, at most the number of blocks).
        blocks: The attribute path of the block list (``"encoder.layer"``), or ``None`` for the largest.
        optimizer: A name of :data:`OPTIMIZER_SLOTS` or an optimizer object.
        device: A key of :data:`IPU_MEMORY`.

    Returns:
        The :class:`PipelineSplit`: first block per IPU and each IPU's estimate.

    Raises:
        ValueError: For ``ipus`` below 2 or above the number of blocks, no block list, blocks not each called once
            in order, or an unknown ``optimizer`` or ``device``.
    """
    capacity = _capacity(device)
    slots = optimizer_slots(optimizer)
    if isinstance(ipus, bool) or not isinstance(ipus, int) or ipus < 2:
        raise ValueError(f"ipus={ipus!r}: a pipeline split needs an int of at least 2 IPUs.")
    path, layers = _find_blocks(model, blocks)
    if ipus > len(layers):
        raise ValueError(
            f"ipus={ipus}: model.{path} has only {len(layers)} blocks; split over at most {len(layers)} IPUs."
        )
    units = _Units({layer: index for index, layer in enumerate(layers)}, "pre", layers[len(layers) - 1])
    units.run(_step_module(model), inputs)
    called = units.calls
    if called != list(range(len(layers))):
        raise ValueError(
            f"model.{path}: its blocks ran in the order {called}, not each once in order 0..{len(layers) - 1}; "
            "a pipeline split needs sequential blocks."
        )
    weights = [units.weights.get(i, 0) for i in range(len(layers))]
    acts = [units.activations.get(i, 0) for i in range(len(layers))]
    weights[0] += units.weights.get("pre", 0)
    acts[0] += units.activations.get("pre", 0)
    weights[-1] += units.weights.get("post", 0)
    acts[-1] += units.activations.get("post", 0)

    def cost(first: int, end: int, stage: int) -> int:
        w, a = sum(weights[first:end]), sum(acts[first:end])
        return (2 + slots) * w + a * (2 * (ipus - 1 - stage) + 1)

    count = len(layers)
    # best[s][i]: the smallest largest-IPU cost placing blocks i.. on stages s..; choice[s][i]: where stage s ends.
    inf = float("inf")
    best = [[inf] * (count + 1) for _ in range(ipus + 1)]
    choice = [[0] * (count + 1) for _ in range(ipus + 1)]
    best[ipus][count] = 0
    for stage in range(ipus - 1, -1, -1):
        for first in range(count - 1, -1, -1):
            for end in range(first + 1, count - (ipus - 1 - stage) + 1):
                value = max(cost(first, end, stage), best[stage + 1][end])
                if value < best[stage][first]:
                    best[stage][first], choice[stage][first] = value, end
    starts, first = [], 0
    for stage in range(ipus):
        starts.append(first)
        first = choice[stage][first]
    ends = [*starts[1:], count]
    stages = []
    for stage, (start, end) in enumerate(zip(starts, ends)):
        memory = _stage_memory(stage, sum(weights[start:end]), sum(acts[start:end]), stage, ipus, slots, capacity)
        memory.blocks = tuple(range(start, end))
        stages.append(memory)
    return PipelineSplit(path, starts, stages)


def size(value: int) -> str:
    """Bytes in MiB (the GC200's "900 MB" is 1472 x 624 KiB = 897 MiB)."""
    return f"{value / _MIB:.1f} MiB"


def _fitting_split(model: torch.nn.Module, inputs: Sequence[Any], optimizer: Any, device: str) -> PipelineSplit | None:
    """The split over the fewest IPUs (a power of two: poptorch reserves those) where every IPU fits, if any."""
    try:
        _, layers = _find_blocks(model, None)
    except ValueError:
        return None
    ipus = 2
    while ipus <= len(layers):
        split = suggest_split(model, *inputs, ipus=ipus, optimizer=optimizer, device=device)
        if all(stage.fits for stage in split.stages):
            return split
        ipus *= 2
    return None


def memory_findings(
    model: torch.nn.Module,
    *inputs: Any,
    ipus: int = 1,
    optimizer: Any = "sgd",
    gradient_accumulation: int = 1,
    device: str = "gc200",
) -> list[Any]:
    """The memory findings of the IPU report: each IPU that does not fit, and with ``ipus > 1`` the split suggestion.

    Returns:
        :class:`~lightning_accel.graphcore.preflight.IPUFinding` objects of kinds ``memory`` and ``pipeline_split``.
    """
    from .preflight import IPUFinding

    if isinstance(ipus, bool) or not isinstance(ipus, int) or ipus < 1:
        raise ValueError(f"ipus={ipus!r}: must be a positive int (1: the model as annotated, or on one IPU).")
    stages = ipu_memory(model, *inputs, optimizer=optimizer, gradient_accumulation=gradient_accumulation, device=device)
    findings = []
    split = None
    if ipus > 1:
        split = suggest_split(model, *inputs, ipus=ipus, optimizer=optimizer, device=device)
        if not _block_hooks(model):
            stages = split.stages  # not annotated yet: judge the split it would get
        findings.append(
            IPUFinding(
                "pipeline_split",
                f"model.{split.blocks_path} over {ipus} IPUs: first blocks {split.starts}",
                "",
                "Balanced by estimated memory (weights, gradients, optimizer state, stashed activations): the most "
                f"loaded IPU needs {size(max(s.total for s in split.stages))} of {size(_capacity(device))}.",
                "; ".join(split.code()),
                {"starts": split.starts, "stages": [s.as_dict() for s in split.stages], "code": split.code()},
            )
        )
    for stage in stages:
        if stage.fits:
            continue
        fix = (
            "Offload the optimizer state (opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings()"
            ".useOnChipStorage(False))), recompute activations, use a smaller micro-batch with more gradient "
            "accumulation, or float16 weights"
        )
        if len(stages) == 1 and split is None:
            fitting = _fitting_split(model, inputs, optimizer, device)
            if fitting is not None:
                lines = "; ".join(fitting.code())
                fix = f"Split it over {len(fitting.starts)} IPUs: {lines}. Or: {fix[0].lower()}{fix[1:]}"
        findings.append(
            IPUFinding(
                "memory",
                f"IPU {stage.ipu} needs {size(stage.total)} of its {size(stage.capacity)}",
                "",
                "The model's tensors must fit the IPU's on-chip memory: Poplar's compile fails with an out-of-memory "
                "error (and this estimate leaves out Poplar's code and temporaries, so the real need is higher).",
                fix + ".",
                stage.as_dict(),
            )
        )
    return findings
