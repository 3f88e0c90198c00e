"""Fully Sharded Data Parallel (torch FSDP) over HCCL for the Trainer."""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.plugins.precision import FSDPPrecision, Precision
from lightning.pytorch.strategies import FSDPStrategy
from typing_extensions import override

from lightning_accel.core.checkpoint_swap import StagedCheckpoints

from .._fsdp import full_state_dict_context
from .._fsdp_strategy import FSDPOnHPUs, hpu_fsdp_precision
from .._strategy_defaults import HPUCheckpointIODefault
from ..fsdp_precision import HPUFSDPPrecision

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from torch.optim import Optimizer

__all__ = ["HPUFSDPStrategy"]


class HPUFSDPStrategy(StagedCheckpoints, FSDPOnHPUs, HPUCheckpointIODefault, FSDPStrategy):
    """Fully Sharded Data Parallel over HCCL (``strategy="hpu_fsdp"``): torch FSDP on HPUs, one process per HPU.

    Each rank keeps a shard of the parameters, gradients and optimizer state (with ``"FULL_SHARD"``, about
    1/world size of them) and gathers the full parameters of a wrapped module only while it runs. Lightning's FSDP
    strategy does the work, with its constructor and arguments unchanged; this class adds what differs on Gaudi: the
    ``"hccl"`` process group (joined without an index-less ``device_id``, see
    :class:`~lightning_accel.habana.distributed.HCCLStrategyMixin`), the HPU torch FSDP shards onto (``hpu:0``: each
    process drives one card), :class:`HPUFSDPPrecision` for ``precision=``, and checkpoints written aside and swapped
    in once every rank has written (a folder of shards with ``"sharded"``, a file through
    :class:`~lightning_accel.habana.HPUCheckpointIO` with ``"full"``), so a kill during a save leaves a whole checkpoint
    (:class:`~lightning_accel.core.checkpoint_swap.StagedCheckpoints`).
    Intel Gaudi runs FSDP in eager mode only: the strategy refuses to start in lazy mode (``PT_HPU_LAZY_MODE=1``).

    Args:
        accelerator: The accelerator (normally set by the Trainer).
        parallel_devices: The HPUs of this node, e.g. ``[torch.device("hpu")] * 8``; the Trainer's ``devices`` by
            default.
        cluster_environment: How processes find each other (Lightning picks one by default).
        checkpoint_io: Checkpoint I/O of ``state_dict_type="full"``; :class:`HPUCheckpointIO` by default.
        precision_plugin: :class:`HPUFSDPPrecision`; Lightning's plugin for ``precision="bf16-mixed"`` or
            ``"32-true"`` becomes one. Other plugins are refused.
        process_group_backend: The ``torch.distributed`` backend: HCCL's ``"hccl"`` where it is None (the default).
        timeout: Timeout of collective operations.
        cpu_offload: Keep parameters (and gradients) on the host between uses: ``True`` or a
            :class:`~torch.distributed.fsdp.CPUOffload`.
        mixed_precision: A :class:`~torch.distributed.fsdp.MixedPrecision` that replaces the precision plugin's.
        auto_wrap_policy: Which submodules become FSDP units (a set of layer classes, or a torch wrap policy).
        activation_checkpointing: Deprecated by Lightning; use ``activation_checkpointing_policy``.
        activation_checkpointing_policy: Which submodules recompute their activations in the backward pass (a set of
            layer classes, or a torch wrap policy).
        sharding_strategy: ``"FULL_SHARD"`` (default), ``"SHARD_GRAD_OP"``, ``"NO_SHARD"``, ``"HYBRID_SHARD"`` or a
            :class:`~torch.distributed.fsdp.ShardingStrategy`.
        state_dict_type: ``"full"`` (one file, gathered on rank 0) or ``"sharded"`` (a folder, one shard per rank).
        device_mesh: ``(replicas, shards)`` or a ``DeviceMesh`` for ``"HYBRID_SHARD"``; built on the HPUs.
        **kwargs: Passed to :class:`torch.distributed.fsdp.FullyShardedDataParallel`.

    Raises:
        ConfigurationError: For a ``state_dict_type`` other than ``"full"`` or ``"sharded"``, a precision plugin
            other than :class:`HPUFSDPPrecision` (or Lightning's for an accepted precision), a non-HPU accelerator,
            or the SDK in lazy mode.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> trainer = Trainer(accelerator="hpu", devices=2, strategy="hpu_fsdp")  # doctest: +SKIP
        >>> import torch
        >>> from lightning_accel.habana import HPUFSDPStrategy
        >>> strategy = HPUFSDPStrategy(auto_wrap_policy={torch.nn.Linear}, state_dict_type="sharded")
    """

    _precision_argument = "precision_plugin"
    _plugin_classes = (HPUFSDPPrecision, FSDPPrecision, Precision)
    precision_plugin = hpu_fsdp_precision("_precision_plugin")
    # Its own list: Lightning refuses names in FSDPStrategy's list unless the accelerator is CUDA.
    _registered_strategies: list[str] = []  # noqa: RUF012

    def _join_process_group(self) -> dict[str, Any]:
        self.setup_distributed()
        return self.kwargs

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        """Set up as Lightning's FSDP does; then the precision plugin clips through the wrapped root module."""
        super().setup(trainer)
        self.precision_plugin.fsdp_module = self.model

    @override
    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        # A later stage of the same Trainer (trainer.test after trainer.fit) gets the LightningModule back with its
        # parameters as views of the shards, which wrapping again would flatten as if they were whole (Lightning's
        # strategy then fails to load a checkpoint into it, Lightning issue #20373): the root wrapped before is reused.
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        root, modules = self.__dict__.get("_hpu_fsdp_root") or (None, ())
        if isinstance(root, FSDP) and root.module is model and all(m in modules for m in model.modules()):
            return root
        wrapped = super()._setup_model(model)
        self.__dict__["_hpu_fsdp_root"] = (wrapped, tuple(wrapped.modules())) if isinstance(wrapped, FSDP) else None
        return wrapped

    @override
    def teardown(self) -> None:
        """Tear down as Lightning's FSDP does, keeping the SyncBatchNorm layers of ``sync_batchnorm=True``.

        Lightning converts them back to BatchNorm here, building new layers around the shard views FSDP no longer
        tracks, so a later stage of the same Trainer ran them on shards. SyncBatchNorm evaluates as BatchNorm does.
        """
        layer_sync, self._layer_sync = self._layer_sync, None
        try:
            super().teardown()
        finally:
            self._layer_sync = layer_sync

    @override
    def lightning_module_state_dict(self) -> dict[str, Any]:
        """The model's state: for ``"full"``, gathered to rank 0's host unit by unit (see ``_fsdp``)."""
        if not self._full:
            return super().lightning_module_state_dict()
        assert self.model is not None
        with full_state_dict_context(self.model):
            return self.model.state_dict()

    @override
    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """An optimizer's state: for ``"full"`` gathered to rank 0's host unit by unit, keyed by parameter index.

        With ``use_orig_params=False`` the full state is keyed by parameter name (torch cannot index flattened
        parameters); resuming reads either.
        """
        if not self._full:
            return super().optimizer_state(optimizer)
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import OptimStateKeyType

        if isinstance(optimizer, LightningOptimizer):
            optimizer = optimizer.optimizer
        assert self.model is not None
        with full_state_dict_context(self.model):
            state: dict[str, Any] = FSDP.optim_state_dict(self.model, optimizer)
            # torch can key the state by parameter index only when the model exposes its original parameters; with
            # use_orig_params=False it stays keyed by parameter name, which the resume reads as it is (Lightning's
            # own strategy fails here).
            if self.global_rank == 0 and self.kwargs.get("use_orig_params", True):
                state = FSDP.rekey_optim_state_dict(state, OptimStateKeyType.PARAM_ID, self.model)
            return state

    @contextmanager
    @override
    def tensor_init_context(self, empty_init: bool | None = None) -> Generator[None, None, None]:
        """Modules made in ``configure_model`` are made on the HPU (on the meta device with ``empty_init``)."""
        with super().tensor_init_context(empty_init), nullcontext() if empty_init else self.root_device:
            yield
