"""Context parallelism for causal language models: each rank of a group holds one slice of every sequence.

optimum-habana's ``context_parallel_size``. Each group of ``context_parallel_size`` consecutive ranks trains on one
batch; rank ``i`` of a group keeps the ``i``-th contiguous slice of every sequence (tokens, positions and the labels,
shifted for next-token prediction before slicing, so no target is lost at a slice boundary). Attention gathers the keys
and values of the whole sequence from the group and attends the local queries under the causal mask moved to the
slice's start; the gradient of the gathered keys and values goes back to their owners by a reduce-scatter (a sum:
HCCL has no average). The loss is the mean over every labelled token of the group's batch. Data parallelism runs over
the ``world_size // context_parallel_size`` groups, and DDP averages the gradients over all ranks.

Attention is reached through :func:`torch.nn.functional.scaled_dot_product_attention`: while the strategy runs a step,
a torch function mode (of this thread only, never the whole process) routes that function to the context-parallel
version. transformers' models with ``attn_implementation="sdpa"`` (Llama, GPT-2 and others) and plain PyTorch models
calling it are covered; a step in which no attention call was routed is refused. A model under
:func:`~lightning_accel.habana.fused.use_fused_sdpa` (optimum-habana's ``gaudi_fused_sdpa``) hands its calls over
with the SDK's FusedSDPA kernel, which then attends each slice over the gathered keys and values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from .fused import routed_through
from .strategies.parallel import HPUParallelStrategy

__all__ = ["ContextParallel", "HPUContextParallelStrategy"]

_SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
# torch 2.13 renamed the tensor collectives (the old names warn); older torch has only the old ones.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_FIX_ATTENTION = (
    "Load a transformers model with attn_implementation='sdpa' (e.g. LlamaForCausalLM.from_pretrained(..., "
    "attn_implementation='sdpa') or config._attn_implementation = 'sdpa'), or call "
    "torch.nn.functional.scaled_dot_product_attention in the model's own attention."
)


class _GatherSequence(torch.autograd.Function):
    """The slices of a ``(..., L, D)`` tensor from every rank of the group, joined along the sequence dimension."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, group: Any, size: int) -> torch.Tensor:
        ctx.group, ctx.size = group, size
        local = local.contiguous()
        # The ranks' tensors one after the other along dimension 0, the layout every backend agrees on.
        gathered = local.new_empty((size * local.shape[0], *local.shape[1:]))
        _all_gather(gathered, local, group=group)
        return torch.cat(gathered.chunk(size, dim=0), dim=-2)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        # Every rank's queries contributed to every slice's gradient: sum them over the group, each rank its own slice.
        stacked = torch.cat(grad.chunk(ctx.size, dim=-2), dim=0).contiguous()
        local = stacked.new_empty((stacked.shape[0] // ctx.size, *stacked.shape[1:]))
        _reduce_scatter(local, stacked, op=dist.ReduceOp.SUM, group=ctx.group)
        return local, None, None


class _RouteAttention(TorchFunctionMode):
    def __init__(self, owner: ContextParallel) -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _SDPA:
            return self.owner._attend(*args, **kwargs)
        return func(*args, **kwargs)


class ContextParallel:
    """One rank's place in a context-parallel group: the slicing of a batch, the attention and the loss.

    :class:`HPUContextParallelStrategy` builds it (``trainer.strategy.context_parallel``); with ``size=1`` it needs no
    process group and is the unsplit computation, which makes the same ``training_step`` run at any size.

    Args:
        size: Ranks per group (``context_parallel_size``).
        rank: This rank's index in its group, ``0 <= rank < size``.
        group: The group's process group (``None`` for the default group, or when ``size`` is 1).

    Example:
        >>> import torch
        >>> cp = ContextParallel(size=1, rank=0)
        >>> inputs, labels = cp.split(torch.tensor([[5, 6, 7, 8]]))
        >>> inputs["position_ids"].tolist(), labels.tolist()
        ([[0, 1, 2, 3]], [[6, 7, 8, -100]])
    """

    def __init__(self, size: int, rank: int, group: Any = None) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ConfigurationError(
                f"context_parallel_size={size!r} is not accepted. Accepted: an int >= 1 (1: no context parallelism)."
            )
        if not 0 <= rank < size:
            raise ConfigurationError(f"rank={rank!r} is not accepted. Accepted: 0 <= rank < size ({size}).")
        self.size, self.rank, self.group = size, rank, group
        #: Attention calls routed through the group since the object was built.
        self.routed_calls = 0
        #: Calls of :meth:`loss` since the object was built.
        self.loss_calls = 0
        # The local slice length of the last split() of the running step (None: no split yet).
        self._local_length: int | None = None

    def split(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        ignore_index: int = -100,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """This rank's slice of a batch of causal-LM sequences, as ``(model inputs, shifted labels)``.

        The labels (``input_ids`` when ``None``) are shifted by one token before slicing, so the last token of a
        slice still predicts the first token of the next. Pass the inputs (``input_ids``, ``position_ids``) to the
        model and the labels to :meth:`loss`, not to the model (which would shift them again).

        Args:
            input_ids: Token ids, ``(batch, sequence)``; the sequence length must divide by ``size``.
            labels: Targets in the same positions as ``input_ids`` (``ignore_index`` where none), or ``None``.
            attention_mask: Accepted only without padding (all ones); padded batches are refused.
            ignore_index: The label that marks a position without a target.

        Raises:
            ConfigurationError: For a sequence length that ``size`` does not divide, or a padded ``attention_mask``.
        """
        if input_ids.dim() != 2:
            raise ConfigurationError(
                f"input_ids of shape {tuple(input_ids.shape)} is not accepted. Accepted: (batch, sequence)."
            )
        batch, length = input_ids.shape
        if length % self.size:
            raise ConfigurationError(
                f"The sequence length {length} (input_ids.shape[1]) is not divisible by context_parallel_size="
                f"{self.size}. Accepted: a multiple of {self.size}. Pad or truncate the sequences to a multiple of "
                f"{self.size} (e.g. the tokenizer's pad_to_multiple_of, with labels -100 on the padding)."
            )
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ConfigurationError(
                "attention_mask with padding (zeros) is not accepted with context parallelism: the gathered "
                "attention applies the causal mask only. Accepted: no attention_mask or all ones. Pack the "
                "sequences to full length, or pad with tokens whose labels are -100 and leave the mask out."
            )
        targets = input_ids if labels is None else labels
        shifted = torch.cat([targets[:, 1:], targets.new_full((batch, 1), ignore_index)], dim=1)
        positions = torch.arange(length, device=input_ids.device).expand(batch, length)
        self._local_length = length // self.size
        local = slice(self.rank * self._local_length, (self.rank + 1) * self._local_length)
        return {"input_ids": input_ids[:, local], "position_ids": positions[:, local]}, shifted[:, local]

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
        """Cross entropy averaged over every labelled token of the group's batch.

        The value is the same on every rank of the group: the unsplit batch's mean. Its gradient is ``size`` times
        this rank's share, so that DDP's average over all ranks is the average of the groups' means.

        Args:
            logits: ``(batch, local sequence, vocabulary)`` from the model on this rank's slice.
            labels: The shifted labels from :meth:`split`.
            ignore_index: The label that marks a position without a target.
        """
        total = F.cross_entropy(
            logits.float().flatten(0, 1), labels.flatten(), ignore_index=ignore_index, reduction="sum"
        )
        counted = (labels != ignore_index).sum().to(total.dtype)
        self.loss_calls += 1
        if self.size == 1:
            return total / counted
        both = torch.stack([total.detach(), counted])
        dist.all_reduce(both, op=dist.ReduceOp.SUM, group=self.group)
        share = total * self.size / both[1]
        return share + (both[0] / both[1] - share).detach()

    @contextmanager
    def attention(self) -> Iterator[ContextParallel]:
        """Route this thread's ``scaled_dot_product_attention`` calls through the group while the block runs.

        A step starts here: the attention then needs a :meth:`split` of this step first.
        """
        self._local_length = None
        with self._routed():
            yield self

    @contextmanager
    def _routed(self) -> Iterator[None]:
        # Unsplit (size 1): the model's own attention is already the right one; only count that it is reached.
        # use_fused_sdpa's calls (optimum-habana's gaudi_fused_sdpa) come through routed_through with their kernel.
        with _CountAttention(self) if self.size == 1 else _RouteAttention(self), routed_through(self._attend_fused):
            yield

    def _attend_fused(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None,
        dropout_p: float,
        is_causal: bool,
        scale: float | None,
        enable_gqa: bool,
        *,
        kernel: Callable[..., torch.Tensor],
    ) -> torch.Tensor:
        if self.size == 1:
            self.routed_calls += 1
            return kernel(query, key, value, attn_mask, dropout_p, is_causal, scale)
        return self._attend(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, kernel=kernel)

    def _attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
        kernel: Callable[..., torch.Tensor] | None = None,
    ) -> torch.Tensor:
        if attn_mask is not None or not is_causal:
            raise ConfigurationError(
                f"scaled_dot_product_attention(attn_mask={'a tensor' if attn_mask is not None else None}, "
                f"is_causal={is_causal}) is not accepted under context parallelism. Accepted: is_causal=True with no "
                "attn_mask (causal self-attention without padding). Leave attention_mask out of the model's inputs "
                "and do not pad; a bidirectional model (an encoder) cannot be split by context parallelism. Under "
                "torch.compile, transformers passes an explicit causal mask: context parallelism runs in eager and "
                "lazy mode only."
            )
        length = query.shape[-2]
        if self._local_length != length:
            raise ConfigurationError(
                f"Attention over {length} positions under context_parallel_size={self.size}, but "
                + (
                    "the step did not split its batch"
                    if self._local_length is None
                    else f"the step's split gave slices of {self._local_length} positions"
                )
                + ": each rank would attend over a whole sequence, not its slice. Call "
                "trainer.strategy.context_parallel.split(input_ids) in the step and give the model its inputs."
            )
        if key.shape[-2] != length:
            raise ConfigurationError(
                f"Keys of length {key.shape[-2]} for queries of length {length}: a key/value cache is not accepted "
                "under context parallelism. Pass use_cache=False to the model."
            )
        self.routed_calls += 1
        key = _GatherSequence.apply(key, self.group, self.size)
        value = _GatherSequence.apply(value, self.group, self.size)
        # Causal from the slice's start: local query i sits at position rank * length + i of the whole sequence.
        rows = torch.arange(length, device=query.device) + self.rank * length
        allowed = torch.arange(key.shape[-2], device=query.device)[None, :] <= rows[:, None]
        if kernel is not None:  # FusedSDPA, which groups the query heads by key heads itself
            return kernel(query, key, value, allowed, dropout_p, False, scale)
        extra = {"enable_gqa": True} if enable_gqa else {}
        return F.scaled_dot_product_attention(
            query, key, value, attn_mask=allowed, dropout_p=dropout_p, scale=scale, **extra
        )


class _CountAttention(TorchFunctionMode):
    def __init__(self, owner: ContextParallel) -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in _SDPA:
            self.owner.routed_calls += 1
        return func(*args, **(kwargs or {}))


def _refuse_compiled(module: torch.nn.Module | None, size: int) -> None:
    """Refuse a module with a compiled part: the attention it would run cannot be split (see ``_attend``)."""
    from torch._dynamo import OptimizedModule

    for name, sub in module.named_modules() if module is not None else ():
        if isinstance(sub, OptimizedModule) or getattr(sub, "_compiled_call_impl", None) is not None:
            raise ConfigurationError(
                f"context_parallel_size={size}: {name or type(module).__name__} is compiled (torch.compile / "
                "Module.compile / HPUCompile). Context parallelism runs in eager and lazy mode only: under "
                "torch.compile transformers gives attention an explicit causal mask, which the split cannot offset "
                "to each rank's slice. Leave the model uncompiled."
            )


def _non_sdpa_attention(module: torch.nn.Module) -> str | None:
    # transformers' models name their attention implementation in their config; anything but SDPA bypasses the route.
    for sub in module.modules():
        implementation = getattr(getattr(sub, "config", None), "_attn_implementation", None)
        if isinstance(implementation, str) and implementation != "sdpa":
            return f"{type(sub).__name__} has attn_implementation={implementation!r}"
    return None


class HPUContextParallelStrategy(HPUParallelStrategy):
    """Context parallelism over HCCL: :class:`HPUParallelStrategy` with each sequence split over a group of ranks.

    Each group of ``context_parallel_size`` consecutive ranks trains on one batch (the distributed sampler gives
    a batch per group, not per rank); data parallelism runs over the groups. The LightningModule slices its batch
    and computes its loss through ``self.trainer.strategy.context_parallel`` (a :class:`ContextParallel`); the model's
    ``torch.nn.functional.scaled_dot_product_attention`` calls are routed through the group during each step (and
    its backward). Causal self-attention only, without padding or a key/value cache; the sequence length must
    divide by ``context_parallel_size``. Checked on the emulated HPU only.

    Args:
        context_parallel_size: Ranks per group; must divide the world size. 1 runs the unsplit computation.
        **kwargs: :class:`HPUParallelStrategy`'s arguments.

    Raises:
        ConfigurationError: For a size that is not an int >= 1 or does not divide the world size, a model whose
            attention does not go through SDPA (refused at set-up for transformers models, after the first step
            otherwise), and the inputs refused by :class:`ContextParallel`.

    Example:
        >>> from lightning.pytorch import LightningModule, Trainer
        >>> class CausalLM(LightningModule):
        ...     def training_step(self, batch, batch_idx):
        ...         cp = self.trainer.strategy.context_parallel
        ...         inputs, labels = cp.split(batch["input_ids"])
        ...         logits = self.model(**inputs, use_cache=False).logits
        ...         return cp.loss(logits, labels)
        >>> strategy = HPUContextParallelStrategy(context_parallel_size=2)
        >>> trainer = Trainer(accelerator="hpu", devices=2, strategy=strategy)  # doctest: +SKIP
    """

    def __init__(self, context_parallel_size: int = 2, **kwargs: Any) -> None:
        ContextParallel(context_parallel_size, 0)  # refuses a bad size before any process starts
        super().__init__(**kwargs)
        self.context_parallel_size = context_parallel_size
        self._context_parallel: ContextParallel | None = None
        self._checked_first_step = False

    @property
    def context_parallel(self) -> ContextParallel:
        """This rank's :class:`ContextParallel` (after the processes joined)."""
        if self._context_parallel is None:
            raise RuntimeError(
                "HPUContextParallelStrategy.context_parallel is built when the processes join; use it in the "
                "LightningModule's steps."
            )
        return self._context_parallel

    @override
    def setup_distributed(self) -> None:
        """Join the process group, then make the context-parallel groups of consecutive ranks."""
        super().setup_distributed()
        size, world = self.context_parallel_size, self.world_size
        if world % size:
            raise ConfigurationError(
                f"context_parallel_size={size} does not divide the world size {world} (devices x num_nodes). "
                f"Accepted: a divisor of {world}. Change context_parallel_size or the number of devices."
            )
        mine = None
        if size > 1:
            # Every rank must take part in creating every group, its own or not.
            for start in range(0, world, size):
                group = dist.new_group(list(range(start, start + size)))
                if start <= self.global_rank < start + size:
                    mine = group
        self._context_parallel = ContextParallel(size, self.global_rank % size, mine)

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        """One share of the data per context-parallel group: the ranks of a group read the same batch."""
        size = self.context_parallel_size
        return {"num_replicas": self.num_nodes * self.num_processes // size, "rank": self.global_rank // size}

    @override
    def setup(self, trainer: Any) -> None:
        """Refuse a transformers model whose attention does not go through SDPA, then set up as DDP does."""
        if self.context_parallel_size > 1 and self.lightning_module is not None:
            found = _non_sdpa_attention(self.lightning_module)
            if found:
                raise ConfigurationError(
                    f"{found}: its attention does not go through scaled_dot_product_attention, so "
                    f"context_parallel_size={self.context_parallel_size} could not split it. {_FIX_ATTENTION}"
                )
        super().setup(trainer)

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        cp = self.context_parallel
        if cp.size > 1:
            # Checked at every step: a callback may compile the model after the first one (compile from step 2).
            _refuse_compiled(self.lightning_module, cp.size)
        before, losses = cp.routed_calls, cp.loss_calls
        with cp.attention():
            output = super().training_step(*args, **kwargs)
        if cp.size > 1 and cp.loss_calls == losses:
            raise ConfigurationError(
                f"context_parallel_size={cp.size}: the training step of {type(self.lightning_module).__name__} did "
                "not compute its loss with trainer.strategy.context_parallel.loss(logits, labels). A loss over this "
                "rank's slice alone (e.g. the model's own, from labels=...) is not the batch's mean and shifts the "
                "labels within the slice, losing a target at each boundary. Return cp.loss(logits, labels) with the "
                "labels from cp.split(...)."
            )
        if not self._checked_first_step:
            self._checked_first_step = True
            # At size 1 nothing is split, so any attention is right.
            if cp.size > 1 and cp.routed_calls == before:
                name = type(self.lightning_module).__name__
                raise ConfigurationError(
                    f"context_parallel_size={self.context_parallel_size}: the first training step of {name} made no "
                    f"scaled_dot_product_attention call, so its attention was not split over the group (eager or "
                    f"custom attention). {_FIX_ATTENTION}"
                )
        return output

    @override
    def backward(self, *args: Any, **kwargs: Any) -> Any:
        # Activation checkpointing runs the attention again in backward: route it there too, on the step's split.
        with self.context_parallel._routed():
            return super().backward(*args, **kwargs)

    @override
    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        with self.context_parallel.attention():
            return super().validation_step(*args, **kwargs)

    @override
    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        with self.context_parallel.attention():
            return super().test_step(*args, **kwargs)

    @override
    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        with self.context_parallel.attention():
            return super().predict_step(*args, **kwargs)

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Registers no name: build it with ``HPUContextParallelStrategy(context_parallel_size=...)``."""
