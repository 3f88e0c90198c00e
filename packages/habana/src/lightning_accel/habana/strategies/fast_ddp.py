"""Data parallel without DDP's reducer: optimum-habana's ``distribution_strategy="fast_ddp"`` as a Lightning strategy.

optimum-habana's fast DDP (``optimum.habana.distributed.all_reduce_gradients``) leaves the model unwrapped. Its
parameters are broadcast from rank 0 once, before training; after the backward pass of each step that updates the
weights, every gradient is divided by the world size and copied into one flat buffer, the buffer is all-reduced in
one collective, and the sums are copied back into the gradients. No autograd hooks, no buckets, no reducer.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Literal

import torch
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from torch import Tensor
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from .parallel import HPUParallelStrategy

__all__ = ["GradientFusion", "HPUFastDDPStrategy"]

_BUFFER_DTYPES = (torch.float32, torch.bfloat16)


class GradientFusion:
    """One flat buffer holding every gradient of a module, all-reduced in one collective.

    The set of parameters with a gradient is taken at the first :meth:`all_reduce`, and must stay the same after:
    a parameter whose gradient appears or disappears later is refused (optimum-habana's ``all_reduce_gradients``
    skips such a gradient without a word).

    Args:
        module: The module whose gradients are reduced.
        dtype: The buffer's dtype: ``torch.float32`` (the sums DDP computes) or ``torch.bfloat16`` (half the
            traffic, optimum-habana's default; gradients are rounded to bfloat16 before they are summed).

    Example:
        >>> import torch
        >>> fusion = GradientFusion(torch.nn.Linear(2, 2), dtype=torch.float32)
        >>> fusion.reductions
        0
    """

    def __init__(self, module: torch.nn.Module, dtype: torch.dtype = torch.float32) -> None:
        if dtype not in _BUFFER_DTYPES:
            raise ConfigurationError(
                f"buffer_dtype={dtype!r} is not accepted. Accepted: torch.float32 (sums as DDP computes them) or "
                "torch.bfloat16 (half the traffic, as optimum-habana's fast_ddp)."
            )
        self.module = module
        self.dtype = dtype
        self.reductions = 0
        self._names: dict[int, str] = {id(p): n for n, p in module.named_parameters()}
        self._entries: list[tuple[torch.nn.Parameter, Tensor]] | None = None
        self._buffer: Tensor | None = None

    def _build(self) -> None:
        grads = [(p, p.grad) for p in self.module.parameters() if p.grad is not None]
        total = 0
        for _, grad in grads:
            total += grad.numel()
        self._entries = []
        if total == 0:
            return
        self._buffer = torch.zeros(total, dtype=self.dtype, device=grads[0][1].device)
        offset = 0
        for p, grad in grads:
            self._entries.append((p, self._buffer[offset : offset + grad.numel()].view(grad.shape)))
            offset += grad.numel()

    def _check_same_gradients(self) -> None:
        assert self._entries is not None
        reduced = {id(p) for p, _ in self._entries}
        for name, p in self.module.named_parameters():
            if (p.grad is not None) != (id(p) in reduced):
                now = "has a gradient now but had none" if p.grad is not None else "has no gradient now but had one"
                raise RuntimeError(
                    f"fast_ddp: parameter {name!r} {now} at the first step. fast_ddp reduces the gradients of the "
                    "parameters that had one at the first step, in one fixed buffer, so that set must not change "
                    "(a frozen or unused parameter must stay so). Use HPUParallelStrategy(find_unused_parameters=True) "
                    "for a model whose used parameters change between steps."
                )

    def all_reduce(self, group: Any = None) -> None:
        """Average the gradients over ``group`` (the whole world by default), in place.

        Raises:
            RuntimeError: When the parameters with a gradient differ from those of the first call.
        """
        if self._entries is None:
            self._build()
        else:
            self._check_same_gradients()
        assert self._entries is not None
        if not self._entries:
            return
        group = torch.distributed.group.WORLD if group is None else group
        scale = 1.0 / torch.distributed.get_world_size(group)
        for p, view in self._entries:
            grad = p.grad
            assert grad is not None
            # Divided before the sum, as DDP's reducer does: the result is the mean, in the buffer's precision.
            view.copy_(grad.to(self.dtype) * scale)
        assert self._buffer is not None
        torch.distributed.all_reduce(self._buffer, group=group)
        for p, view in self._entries:
            grad = p.grad
            assert grad is not None
            grad.copy_(view)
        self.reductions += 1


class HPUFastDDPStrategy(HPUParallelStrategy):
    """Data parallel over HCCL without ``DistributedDataParallel``: optimum-habana's ``fast_ddp``.

    The model is not wrapped. Its parameters and buffers are broadcast from rank 0 when fitting starts; after the
    backward pass of each step that updates the weights (not inside gradient accumulation), the gradients are
    averaged over the ranks through one flat buffer in one all-reduce (:class:`GradientFusion`). Gradient clipping
    and the optimizer then see the averaged gradients, as under DDP. Everything else (processes, rendezvous, HCCL,
    reductions, checkpointing) is :class:`HPUParallelStrategy`'s.

    Differences from DDP: buffers (batch-norm statistics) are broadcast once, not before every forward pass as DDP's
    ``broadcast_buffers=True`` does; communication does not overlap the backward pass; the parameters with a gradient
    must be the same at every step (a change is refused). DDP's own arguments (communication hooks,
    ``find_unused_parameters``, ``static_graph``, bucket sizes) do not apply and are refused.

    Args:
        accelerator: The accelerator (normally set by the Trainer).
        parallel_devices: The HPUs of this node; the Trainer's ``devices`` by default.
        cluster_environment: How processes find each other (Lightning picks one by default).
        checkpoint_io: Checkpoint I/O; :class:`HPUCheckpointIO` by default.
        precision_plugin: Precision plugin.
        process_group_backend: The ``torch.distributed`` backend: HCCL's where None.
        timeout: Timeout of collective operations.
        start_method: How Lightning starts the processes of this node.
        buffer_dtype: The fused buffer's dtype: ``torch.float32`` (default: the gradients DDP computes) or
            ``torch.bfloat16`` (optimum-habana's default: half the traffic, gradients rounded to bfloat16).

    Example:
        >>> import torch
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUAccelerator, HPUFastDDPStrategy
        >>> strategy = HPUFastDDPStrategy(parallel_devices=[torch.device("hpu")] * 2)
        >>> trainer = Trainer(accelerator=HPUAccelerator(), strategy=strategy, devices=2)  # doctest: +SKIP
    """

    strategy_name = "hpu_fast_ddp"

    def __init__(
        self,
        accelerator: Any = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        checkpoint_io: Any = None,
        precision_plugin: Any = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        buffer_dtype: torch.dtype = torch.float32,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise ConfigurationError(
                f"HPUFastDDPStrategy: {', '.join(sorted(kwargs))} not accepted: these are arguments of "
                "DistributedDataParallel, which fast_ddp does not build. Accepted: accelerator, parallel_devices, "
                "cluster_environment, checkpoint_io, precision_plugin, process_group_backend, timeout, start_method, "
                "buffer_dtype. For DDP's options use HPUParallelStrategy."
            )
        if buffer_dtype not in _BUFFER_DTYPES:
            raise ConfigurationError(
                f"HPUFastDDPStrategy(buffer_dtype={buffer_dtype!r}) is not accepted. Accepted: torch.float32 or "
                "torch.bfloat16 (HCCL reduces both natively)."
            )
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
        )
        self.buffer_dtype = buffer_dtype
        self.fusion: GradientFusion | None = None
        self._accumulating = False

    @override
    def configure_ddp(self) -> None:
        """Leave the model unwrapped; broadcast its parameters and buffers from rank 0 so every rank starts equal."""
        assert self.model is not None
        with torch.no_grad():
            for tensor in [*self.model.parameters(), *self.model.buffers()]:
                torch.distributed.broadcast(tensor.data, src=0)
        self.fusion = GradientFusion(self.model, self.buffer_dtype)

    @override
    @contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Skip the gradient all-reduce for the backward passes inside (gradient accumulation)."""
        previous = self._accumulating
        self._accumulating = True
        try:
            yield None
        finally:
            self._accumulating = previous

    @override
    def post_backward(self, closure_loss: Tensor) -> None:
        """Average the gradients over the ranks, except inside gradient accumulation."""
        super().post_backward(closure_loss)
        if self.fusion is not None and not self._accumulating:
            self.fusion.all_reduce()

    @property
    def gradient_reductions(self) -> int:
        """How many times the gradients were averaged over the ranks (once per weight update)."""
        return 0 if self.fusion is None else self.fusion.reductions

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"hpu_fast_ddp"``."""
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__, override=True)
