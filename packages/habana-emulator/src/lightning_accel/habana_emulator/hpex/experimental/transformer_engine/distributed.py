"""Emulation of ``transformer_engine.distributed``: tensor-parallel helpers and fp8-aware activation checkpointing.

Source: gaudi-pytorch-bridge 1.18.0, ``hpex/experimental/transformer_engine/distributed.py``. Rule by rule:

- the collectives (``allreduce``, ``gather_along_first_dim``, ``gather_along_last_dim``,
  ``reduce_scatter_along_first_dim``) return ``(tensor, handle)`` and pass the input through with no handle when the
  group has one process (or ``torch.distributed`` is not initialised);
- ``checkpoint(function, distribute_saved_activations, get_cuda_rng_tracker, tp_group, *args, **kwargs)`` runs
  ``function`` without keeping its activations and runs it again in the backward pass. Both runs happen inside
  ``activation_recompute_forward``: the Transformer Engine layers measure their amaxes in the first run (gradients
  off) and stash their forward scaling state; the second run (the recompute phase) uses the stashed scales, so it
  computes the same numbers, and records nothing new. As on the SDK, that holds when the backward pass runs inside
  ``fp8_autocast(enabled=True)``: ``activation_recompute_forward`` enables the recompute only while fp8 is enabled
  (``:150-153``), so a backward outside it recomputes with plain layers. The random state is saved before the first
  run and restored for the second: the process's default generator (which ``"hpu"`` random numbers draw from on the
  emulator) and the tracker's states.

Where the emulator differs: the SDK saves ``torch.cuda``'s random state besides the CPU one (``:203,233``); the
emulator has no CUDA generator of its own to save (on a CUDA backing its ``"hpu"`` draws come from CUDA's default
generator, which it saves).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.checkpoint import detach_variable

from .constants import dist_group_type
from .fp8 import FP8GlobalStateManager
from .utils import safely_set_viewless_tensor_data

__all__ = [
    "CheckpointFunction",
    "FP8GlobalStateManager",
    "activation_checkpointing",
    "activation_recompute_forward",
    "allreduce",
    "checkpoint",
    "dist_group_type",
    "gather_along_first_dim",
    "gather_along_last_dim",
    "gather_split_1d_tensor",
    "get_distributed_rank",
    "get_distributed_world_size",
    "in_fp8_activation_recompute_phase",
    "initialize_affine_weight_hpu",
    "is_fp8_activation_recompute_enabled",
    "reduce_scatter_along_first_dim",
    "safely_set_viewless_tensor_data",
    "set_fp8_activation_recompute_phase",
    "set_tensor_model_parallel_attributes",
    "split_tensor_into_1d_equal_chunks",
]

_PARALLEL_ATTRIBUTES = ("tensor_model_parallel", "partition_dim", "partition_stride")
_RECOMPUTE_ENABLED = False
_RECOMPUTE_PHASE = False


def set_tensor_model_parallel_attributes(tensor: torch.Tensor, is_parallel: bool, dim: int, stride: int) -> None:
    """Mark ``tensor`` as (not) split over the tensor-parallel group, along ``dim`` with ``stride``."""
    for attribute in _PARALLEL_ATTRIBUTES:
        assert not hasattr(tensor, attribute)
    tensor.tensor_model_parallel = is_parallel  # type: ignore[attr-defined]
    tensor.partition_dim = dim  # type: ignore[attr-defined]
    tensor.partition_stride = stride  # type: ignore[attr-defined]


def get_distributed_world_size(group: dist_group_type | None = None) -> int:
    """The size of ``group`` (1 when ``torch.distributed`` is not initialised)."""
    if not torch.distributed.is_initialized():
        return 1
    return int(torch.distributed.get_world_size(group=group))


def get_distributed_rank(group: dist_group_type | None = None) -> int:
    """This process's rank in ``group``."""
    assert torch.distributed.is_initialized(), "torch.distributed is not initialized."
    return int(torch.distributed.get_rank(group=group))


def initialize_affine_weight_hpu(
    weight: torch.Tensor,
    init_method: Callable[..., Any],
    get_rng_state_tracker: Callable[..., Any],
    partition_dim: int,
    stride: int = 1,
) -> None:
    """Mark ``weight`` as tensor-parallel and initialise it (inside the tracker's fork when there is one)."""
    set_tensor_model_parallel_attributes(tensor=weight, is_parallel=True, dim=partition_dim, stride=stride)
    if get_rng_state_tracker is None:
        init_method(weight)
        return
    with get_rng_state_tracker().fork():
        init_method(weight)


def split_tensor_into_1d_equal_chunks(
    tensor: torch.Tensor, tp_group: dist_group_type, new_buffer: bool = False
) -> torch.Tensor:
    """This rank's equal share of ``tensor``, flattened (a copy with ``new_buffer``)."""
    size = torch.numel(tensor) // get_distributed_world_size(tp_group)
    start = size * get_distributed_rank(tp_group)
    share = tensor.view(-1)[start : start + size]
    return share.clone() if new_buffer else share


def gather_split_1d_tensor(tensor: torch.Tensor, tp_group: dist_group_type) -> torch.Tensor:
    """The shares of every rank, gathered into one flat tensor (the inverse of the split)."""
    gathered = torch.empty(
        torch.numel(tensor) * get_distributed_world_size(tp_group), dtype=tensor.dtype, device=tensor.device
    )
    torch.distributed.all_gather_into_tensor(gathered, tensor, group=tp_group)
    return gathered


@contextmanager
def activation_recompute_forward(activation_recompute: bool = False, recompute_phase: bool = False) -> Iterator[None]:
    """Tell the layers that they run under checkpointing (fp8 only), and whether this is the recompute phase."""
    global _RECOMPUTE_ENABLED, _RECOMPUTE_PHASE
    try:
        _RECOMPUTE_ENABLED = activation_recompute and FP8GlobalStateManager.is_fp8_enabled()
        _RECOMPUTE_PHASE = recompute_phase
        yield
    finally:
        _RECOMPUTE_ENABLED = False
        _RECOMPUTE_PHASE = False


@contextmanager
def activation_checkpointing() -> Iterator[None]:
    """Tell the layers that they run under a checkpointing of the user's own (forward without, then with grad)."""
    global _RECOMPUTE_ENABLED, _RECOMPUTE_PHASE
    try:
        _RECOMPUTE_ENABLED = True
        yield
    finally:
        _RECOMPUTE_ENABLED = False
        _RECOMPUTE_PHASE = False


def is_fp8_activation_recompute_enabled() -> bool:
    """Whether the layers run under activation checkpointing."""
    return _RECOMPUTE_ENABLED


def in_fp8_activation_recompute_phase() -> bool:
    """Whether this is the recompute phase of an activation checkpointing."""
    return _RECOMPUTE_PHASE


def set_fp8_activation_recompute_phase(in_recompute_phase: bool) -> None:
    """Set whether this is the recompute phase."""
    global _RECOMPUTE_PHASE
    _RECOMPUTE_PHASE = in_recompute_phase


def _random_state() -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_random_state(state: tuple[torch.Tensor, torch.Tensor | None]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1])


class CheckpointFunction(torch.autograd.Function):
    """``torch.utils.checkpoint``'s function with the tracker's random states and fp8 recompute phases."""

    @staticmethod
    def forward(
        ctx: Any,
        run_function: Callable[..., Any],
        distribute_saved_activations: bool,
        get_cuda_rng_tracker: Callable[..., Any],
        tp_group: dist_group_type,
        kwargs: dict[str, Any],
        *args: Any,
    ) -> Any:
        """Run ``run_function`` without keeping activations; save the inputs and the random states."""
        ctx.run_function = run_function
        ctx.distribute_saved_activations = distribute_saved_activations
        ctx.forward_random_state = _random_state()
        ctx.forward_tracker_state = get_cuda_rng_tracker().get_states()
        with torch.no_grad(), activation_recompute_forward(activation_recompute=True, recompute_phase=False):
            outputs = run_function(*args, **kwargs)
        if distribute_saved_activations:
            ctx.input_0_shape = args[0].data.shape
            safely_set_viewless_tensor_data(
                args[0], split_tensor_into_1d_equal_chunks(args[0].data, tp_group, new_buffer=True)
            )
        ctx.save_for_backward(*args)
        ctx.get_cuda_rng_tracker = get_cuda_rng_tracker
        ctx.tp_group = tp_group
        ctx.kwargs = kwargs
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        """Run ``run_function`` again with the forward's random states and fp8 scales, then back-propagate."""
        if not torch.autograd._is_checkpoint_valid():
            raise RuntimeError("Checkpointing is not compatible with .grad(), please use .backward() if possible")
        inputs = ctx.saved_tensors
        tracker = ctx.get_cuda_rng_tracker
        if ctx.distribute_saved_activations:
            safely_set_viewless_tensor_data(
                inputs[0], gather_split_1d_tensor(inputs[0].data, ctx.tp_group).view(ctx.input_0_shape)
            )
        backward_random_state = _random_state()
        backward_tracker_state = tracker().get_states()
        _set_random_state(ctx.forward_random_state)
        tracker().set_states(ctx.forward_tracker_state)
        detached = detach_variable(inputs)
        with torch.enable_grad(), activation_recompute_forward(activation_recompute=True, recompute_phase=True):
            outputs = ctx.run_function(*detached, **ctx.kwargs)
        _set_random_state(backward_random_state)
        tracker().set_states(backward_tracker_state)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        torch.autograd.backward(outputs, grads)
        input_grads = [value.grad if isinstance(value, torch.Tensor) else value for value in detached]
        return (None, None, None, None, None, *input_grads)


def checkpoint(
    function: Callable[..., Any],
    distribute_saved_activations: bool,
    get_cuda_rng_tracker: Callable[..., Any],
    tp_group: dist_group_type,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """Run ``function(*args, **kwargs)`` trading compute for memory: recomputed in the backward pass.

    Args:
        function: What to run; it must compute the same thing twice from the same inputs and random state.
        distribute_saved_activations: Keep only this rank's share of the first input between the passes.
        get_cuda_rng_tracker: Returns a tracker with ``get_states()``/``set_states()`` (Megatron's), restored for the
            recompute.
        tp_group: The tensor-parallel group of ``distribute_saved_activations``.
        *args: The tensor inputs.
        **kwargs: Keyword arguments of ``function``.

    Example:
        >>> out = checkpoint(layer, False, get_tracker, None, x)  # doctest: +SKIP
    """
    return CheckpointFunction.apply(
        function, distribute_saved_activations, get_cuda_rng_tracker, tp_group, kwargs, *args
    )


def _pass_through(group: dist_group_type | None) -> bool:
    return get_distributed_world_size(group) == 1


def reduce_scatter_along_first_dim(
    input_: torch.Tensor, tp_group: dist_group_type, async_op: bool = False
) -> tuple[torch.Tensor, Any]:
    """Sum ``input_`` over the group and keep this rank's slice of the first dimension."""
    if _pass_through(tp_group):
        return input_, None
    world_size = get_distributed_world_size(tp_group)
    sizes = list(input_.size())
    assert sizes[0] % world_size == 0, "First dimension of the tensor should be divisible by tensor parallel size"
    sizes[0] //= world_size
    output = torch.empty(sizes, dtype=input_.dtype, device=input_.device)
    handle = torch.distributed.reduce_scatter_tensor(output, input_.contiguous(), group=tp_group, async_op=async_op)
    return output, handle


def _gather(input_: torch.Tensor, tp_group: dist_group_type, async_op: bool, dim: int) -> tuple[torch.Tensor, Any]:
    if _pass_through(tp_group):
        return input_, None
    sizes = list(input_.size())
    sizes[dim] *= get_distributed_world_size(tp_group)
    output = torch.empty(sizes, dtype=input_.dtype, device=input_.device)
    # As the SDK (``:351-365``): one all_gather_into_tensor into the enlarged output, so the ranks' blocks follow one
    # another in memory (for the last dimension that is not an interleaving along it).
    handle = torch.distributed.all_gather_into_tensor(output, input_.contiguous(), group=tp_group, async_op=async_op)
    return output, handle


def gather_along_first_dim(
    input_: torch.Tensor, tp_group: dist_group_type, async_op: bool = False
) -> tuple[torch.Tensor, Any]:
    """The group's tensors concatenated along the first dimension."""
    return _gather(input_, tp_group, async_op, 0)


def gather_along_last_dim(
    input_: torch.Tensor, tp_group: dist_group_type, async_op: bool = False
) -> tuple[torch.Tensor, Any]:
    """The group's tensors concatenated along the last dimension."""
    return _gather(input_, tp_group, async_op, -1)


def allreduce(
    input_: torch.Tensor, tp_group: dist_group_type | None = None, async_op: bool = False
) -> tuple[torch.Tensor, Any]:
    """Sum ``input_`` over the group, in place."""
    if _pass_through(tp_group):
        return input_, None
    handle = torch.distributed.all_reduce(input_, group=tp_group, async_op=async_op)
    return input_, handle
