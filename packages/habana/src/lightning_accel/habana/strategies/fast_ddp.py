"""Data parallel without DDP's reducer: optimum-habana's ``distribution_strategy="fast_ddp"`` as a Lightning strategy.

optimum-habana's fast DDP (``optimum.habana.distributed.all_reduce_gradients``) leaves the model unwrapped. Its
parameters are broadcast from rank 0 once, before training; after the backward pass of each step that updates the
weights, every gradient is divided by the world size and copied into one flat buffer, the buffer is all-reduced in
one collective, and the sums are copied back into the gradients. No autograd hooks, no buckets, no reducer. With
``use_hpu_graphs=True`` (its default, and its trainer's only setting; here the default in lazy mode) the copies
into and out of the buffer are captured as two HPU graphs at the first call and replayed after; the trainer zeroes
gradients with ``set_to_none=False`` under fast_ddp so that the captured gradient tensors stay the parameters'
gradients.
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

from .._gradient_fusion import (
    GradientFusion,
    broadcast_from_rank_zero,
    check_fast_ddp_arguments,
    graphs_for_mode,
    report_graphs,
)
from .parallel import HPUParallelStrategy

__all__ = ["GradientFusion", "HPUFastDDPStrategy"]  # GradientFusion re-exported from its neutral module


class HPUFastDDPStrategy(HPUParallelStrategy):
    """Data parallel over HCCL without ``DistributedDataParallel``: optimum-habana's ``fast_ddp``.

    The model is not wrapped. Its parameters and buffers are broadcast from rank 0 when fitting starts; after the
    backward pass of each step that updates the weights (not inside gradient accumulation), the gradients are
    averaged over the ranks through one flat buffer in one all-reduce (:class:`GradientFusion`). Gradient clipping
    and the optimizer then see the averaged gradients, as under DDP. Everything else (processes, rendezvous, HCCL,
    reductions, checkpointing) is :class:`HPUParallelStrategy`'s.

    With HPU graphs (``use_hpu_graphs=True``, as optimum-habana's trainer; by default in lazy mode), the copies into
    and out of the buffer are captured as two HPU graphs at the first weight update and replayed at the later ones. The
    graphs read and write the gradient tensors they captured, so before each backward pass a gradient that
    ``zero_grad()`` set to None (Lightning's default) gets its captured tensor back, zeroed: the backward pass then
    accumulates into it, as after ``zero_grad(set_to_none=False)``, which optimum-habana's trainer uses under
    fast_ddp for this reason. After the first weight update the strategy checks that both graphs were captured and
    says so (rank zero, info). In eager mode, the SDK's default, HPU graphs cannot be created: by default the strategy
    packs as ordinary operations there, and ``use_hpu_graphs=True`` is refused at set-up.

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
        use_hpu_graphs: True: capture packing and unpacking as HPU graphs and replay them (lazy mode only; refused
            at set-up in eager mode). False: ordinary operations at every weight update. None (default): graphs in
            lazy mode, ordinary operations in eager mode.

    Raises:
        ConfigurationError: For DDP's own arguments, another ``buffer_dtype``, or a ``use_hpu_graphs`` that is not a
            bool or None; at set-up, for ``use_hpu_graphs=True`` in eager mode.
        RuntimeError: After the first weight update, when graphs were asked for and not captured.

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
        use_hpu_graphs: bool | None = None,
        **kwargs: Any,
    ) -> None:
        check_fast_ddp_arguments(
            "HPUFastDDPStrategy",
            kwargs,
            "accelerator, parallel_devices, cluster_environment, checkpoint_io, precision_plugin, "
            "process_group_backend, timeout, start_method, buffer_dtype, use_hpu_graphs",
            buffer_dtype,
            use_hpu_graphs,
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
        self.use_hpu_graphs = use_hpu_graphs
        self.fusion: GradientFusion | None = None
        self._accumulating = False

    @override
    def configure_ddp(self) -> None:
        """Leave the model unwrapped; broadcast its parameters and buffers from rank 0 so every rank starts equal."""
        assert self.model is not None
        # Refused before the broadcast: before any collective, and before any step.
        graphs = graphs_for_mode("HPUFastDDPStrategy", self.use_hpu_graphs)
        broadcast_from_rank_zero(self.model)
        self.fusion = GradientFusion(self.model, self.buffer_dtype, use_hpu_graphs=graphs)

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
    def pre_backward(self, closure_loss: Tensor) -> None:
        """With HPU graphs, give gradients set to None their captured tensors back (GradientFusion.prepare_backward)."""
        super().pre_backward(closure_loss)
        if self.fusion is not None:
            self.fusion.prepare_backward()

    @override
    def post_backward(self, closure_loss: Tensor) -> None:
        """Average the gradients over the ranks, except inside gradient accumulation."""
        super().post_backward(closure_loss)
        if self.fusion is None or self._accumulating:
            return
        self.fusion.all_reduce()
        if self.fusion.use_hpu_graphs and self.fusion.reductions == 1:
            report_graphs("HPUFastDDPStrategy", self.fusion)

    @property
    def gradient_reductions(self) -> int:
        """How many times the gradients were averaged over the ranks (once per weight update)."""
        return 0 if self.fusion is None else self.fusion.reductions

    @property
    def hpu_graphs(self) -> bool:
        """Whether packing and unpacking run as captured HPU graphs (from the first weight update on)."""
        return self.fusion is not None and self.fusion.graphs_captured

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"hpu_fast_ddp"``."""
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__, override=True)
