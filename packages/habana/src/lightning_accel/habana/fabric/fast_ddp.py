"""optimum-habana's ``fast_ddp`` for Fabric: gradients averaged through one flat buffer, no DDP wrapper, no reducer.

The Fabric counterpart of the Trainer's :class:`lightning_accel.habana.HPUFastDDPStrategy`, on the same
:class:`~lightning_accel.habana._gradient_fusion.GradientFusion`. Fabric has no pre/post-backward hooks on the
strategy, so the reduction runs inside the strategy's ``backward``: after the backward pass, before the lazy-mode
graph boundary that follows it, as in the Trainer strategy.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

import torch
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.strategies import DDPStrategy
from torch import Tensor
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from .._gradient_fusion import (
    GradientFusion,
    broadcast_from_rank_zero,
    check_fast_ddp_arguments,
    graphs_for_mode,
    report_graphs,
)
from .strategies import HPUParallelStrategy

if TYPE_CHECKING:
    from lightning.fabric.accelerators import Accelerator
    from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment, Precision

__all__ = ["HPUFastDDPStrategy"]

_NAME = "HPUFastDDPStrategy"
_ACCEPTED = (
    "accelerator, parallel_devices, cluster_environment, checkpoint_io, precision, process_group_backend, timeout, "
    "start_method, buffer_dtype, use_hpu_graphs"
)


def _gradient_state(module: torch.nn.Module) -> list[tuple[Tensor, int] | None]:
    # Which gradient tensor each parameter has and its version counter: a backward pass that wrote a gradient
    # changes one or the other (a new tensor, or an in-place accumulation). The tensors themselves, not their ids:
    # held here, a replaced gradient cannot free its id for the new one.
    return [None if p.grad is None else (p.grad, p.grad._version) for p in module.parameters()]


def _unchanged(now: list[tuple[Tensor, int] | None], before: list[tuple[Tensor, int] | None]) -> bool:
    return all(
        a is b or (a is not None and b is not None and a[0] is b[0] and a[1] == b[1])
        for a, b in zip(now, before, strict=True)
    )


class _FusedBackward(DDPStrategy):
    """The fast_ddp part: one :class:`GradientFusion` per set-up module, reduced after the backward passes.

    A subclass of Fabric's ``DDPStrategy`` so that it sits right before it in :class:`HPUFastDDPStrategy`'s method
    order, after ``MarkStepAfterUpdates``: its ``backward`` then reduces before that mixin closes the lazy graph.
    """

    buffer_dtype: torch.dtype
    use_hpu_graphs: bool | None

    def _fast_ddp_init(self) -> None:
        #: The fusions of the modules set up, in set-up order (the same on every rank: collectives follow it).
        self.fusions: list[GradientFusion] = []
        # Modules inside fabric.no_backward_sync: id -> nesting depth.
        self._sync_blocked: dict[int, int] = {}

    @override
    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:  # type: ignore[override]
        """Leave the module unwrapped; broadcast its parameters and buffers from rank 0 so every rank starts equal.

        Raises:
            ConfigurationError: For ``use_hpu_graphs=True`` in eager mode (before any collective), or a module set up
                before (its gradients would be averaged twice per backward pass).
        """
        if self._fusion_of(module) is not None:
            raise ConfigurationError(
                f"HPUFastDDPStrategy.setup_module: this {type(module).__name__} was set up before, and a second set-up "
                "would average its gradients twice after each backward pass. Accepted: each module set up once; use "
                "the module the first fabric.setup(...) returned."
            )
        graphs = graphs_for_mode(_NAME, self.use_hpu_graphs)
        broadcast_from_rank_zero(module)
        self.fusions.append(GradientFusion(module, self.buffer_dtype, use_hpu_graphs=graphs))
        return module

    @override
    def backward(self, tensor: Tensor, module: torch.nn.Module | None, *args: Any, **kwargs: Any) -> None:
        """Run the backward pass, then average the gradients it wrote over the ranks, per set-up module.

        A module whose gradients this backward pass did not write is left alone (as DDP, whose hooks fire for
        gradients computed); one inside ``fabric.no_backward_sync`` accumulates without a reduction.
        """
        for fusion in self.fusions:
            fusion.prepare_backward()
        before = [_gradient_state(fusion.module) for fusion in self.fusions]
        super().backward(tensor, module, *args, **kwargs)
        for fusion, state in zip(self.fusions, before, strict=True):
            if _unchanged(_gradient_state(fusion.module), state):
                # Untouched: gradients given back for the graphs' sake return to None, as the user left them.
                fusion.release_unwritten()
                continue
            if self._sync_blocked.get(id(fusion.module)):
                continue
            fusion.all_reduce()
            if fusion.use_hpu_graphs and fusion.reductions == 1:
                report_graphs(_NAME, fusion)

    @contextmanager
    def _blocking(self, module: torch.nn.Module) -> Generator[None, None, None]:
        key = id(module)
        self._sync_blocked[key] = self._sync_blocked.get(key, 0) + 1
        try:
            yield None
        finally:
            self._sync_blocked[key] -= 1

    def _fusion_of(self, module: torch.nn.Module) -> GradientFusion | None:
        return next((f for f in self.fusions if f.module is module), None)


class _FastDDPBackwardSyncControl:
    """What ``fabric.no_backward_sync(model)`` asks the strategy for: skip the reduction of ``model``'s gradients."""

    def __init__(self, strategy: _FusedBackward) -> None:
        self._owner = strategy

    def no_backward_sync(self, module: torch.nn.Module, enabled: bool) -> AbstractContextManager[None]:
        """A context in which the backward passes accumulate ``module``'s gradients without averaging them.

        Raises:
            TypeError: For a module this strategy did not set up (as Fabric's DDP for a module it did not wrap).
        """
        if not enabled:
            return nullcontext()
        if self._owner._fusion_of(module) is None:
            raise TypeError(
                f"HPUFastDDPStrategy.no_backward_sync: {type(module).__name__} was not set up by this strategy. Pass "
                "a module returned by fabric.setup(...) or fabric.setup_module(...)."
            )
        return self._owner._blocking(module)


class HPUFastDDPStrategy(HPUParallelStrategy, _FusedBackward):
    """Fabric data parallel over HCCL without ``DistributedDataParallel``: optimum-habana's ``fast_ddp``.

    ``fabric.setup(model)`` returns the model unwrapped, its parameters and buffers broadcast from rank 0. After
    ``fabric.backward(loss)`` the gradients that backward pass wrote are averaged over the ranks through one flat
    buffer in one all-reduce per module (:class:`~lightning_accel.habana.strategies.fast_ddp.GradientFusion`), so the
    optimizer sees DDP's gradients. Inside ``fabric.no_backward_sync(model)`` the backward passes accumulate without a
    reduction; the first backward pass outside it averages the sum, once (gradient accumulation). Whether a module is
    reduced is decided at the backward pass (DDP decides at the forward pass; Fabric asks for both inside the context).

    With HPU graphs (``use_hpu_graphs=True``; by default in lazy mode) the copies into and out of the buffer are
    captured as two HPU graphs at a module's first reduction and replayed after; before each backward pass a gradient
    that ``optimizer.zero_grad()`` set to None gets its captured tensor back, zeroed (and None again if the backward
    pass does not write it). After the first reduction the strategy says the graphs were captured (rank zero, info).
    In eager mode, the SDK's default, HPU graphs cannot be created: by default the packing runs as ordinary operations
    there, and ``use_hpu_graphs=True`` is refused at ``fabric.setup``.

    Differences from DDP: buffers are broadcast once, at set-up; communication does not overlap the backward pass;
    the parameters with a gradient must be the same at every reduction of a module (a change is refused). DDP's own
    arguments (``find_unused_parameters``, ``static_graph``, bucket sizes, ...) do not apply and are refused. Results
    were checked against Fabric's DDP on the emulator only.

    Args:
        accelerator: The accelerator (normally set by Fabric).
        parallel_devices: The HPUs of this node; Fabric's ``devices`` by default.
        cluster_environment: How processes find each other (Lightning picks one by default).
        checkpoint_io: Checkpoint I/O; :class:`~lightning_accel.habana.HPUCheckpointIO` by default.
        precision: Precision plugin.
        process_group_backend: The ``torch.distributed`` backend: HCCL's where None.
        timeout: Timeout of collective operations.
        start_method: How Lightning starts the processes of this node.
        buffer_dtype: The fused buffer's dtype: ``torch.float32`` (default: DDP's gradients) or ``torch.bfloat16``
            (optimum-habana's default: half the traffic, gradients rounded to bfloat16).
        use_hpu_graphs: True: capture packing and unpacking as HPU graphs (lazy mode only; refused at set-up in eager
            mode). False: ordinary operations at every reduction. None (default): graphs in lazy mode only.

    Raises:
        ConfigurationError: For DDP's own arguments, another ``buffer_dtype``, or a ``use_hpu_graphs`` that is not a
            bool or None; at ``fabric.setup``, for ``use_hpu_graphs=True`` in eager mode.

    Example:
        >>> from lightning.fabric import Fabric
        >>> fabric = Fabric(accelerator="hpu", strategy="hpu_fast_ddp", devices=2)  # doctest: +SKIP
        >>> model, optimizer = fabric.setup(model, optimizer)  # doctest: +SKIP
        >>> fabric.backward(loss)  # doctest: +SKIP  # the gradients are averaged here, in one all-reduce
    """

    strategy_name = "hpu_fast_ddp"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        buffer_dtype: torch.dtype = torch.float32,
        use_hpu_graphs: bool | None = None,
        **kwargs: Any,
    ) -> None:
        check_fast_ddp_arguments(_NAME, kwargs, _ACCEPTED, buffer_dtype, use_hpu_graphs)
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision=precision,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
        )
        self.buffer_dtype = buffer_dtype
        self.use_hpu_graphs = use_hpu_graphs
        self._fast_ddp_init()
        # Fabric only calls no_backward_sync on it (and checks it is not None).
        self._backward_sync_control = _FastDDPBackwardSyncControl(self)  # type: ignore[assignment]

    @property
    def gradient_reductions(self) -> int:
        """How many times gradients were averaged over the ranks, summed over the set-up modules."""
        return sum(fusion.reductions for fusion in self.fusions)

    @property
    def hpu_graphs(self) -> bool:
        """Whether every set-up module's packing and unpacking runs as HPU graphs (from its first reduction on)."""
        return bool(self.fusions) and all(fusion.graphs_captured for fusion in self.fusions)

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"hpu_fast_ddp"`` (the core does this from the plugin spec)."""
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__, override=True)
