"""Fully Sharded Data Parallel (torch FSDP) over HCCL for Fabric."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.plugins.precision import FSDPPrecision, Precision
from lightning.fabric.strategies import FSDPStrategy
from typing_extensions import override

from lightning_accel.core.checkpoint_swap import StagedFabricCheckpoints

from .._fsdp import full_state_dict_context
from .._fsdp_strategy import FSDPOnHPUs, hpu_fsdp_precision
from ..checkpoint_io import HPUCheckpointIO
from .fsdp_precision import HPUFSDPPrecision

if TYPE_CHECKING:
    from lightning_accel.core.compat import PathType

__all__ = ["HPUFSDPStrategy"]


class HPUFSDPStrategy(StagedFabricCheckpoints, FSDPOnHPUs, FSDPStrategy):
    """Fabric's Fully Sharded Data Parallel over HCCL (``strategy="hpu_fsdp"``): torch FSDP on HPUs.

    The arguments and behaviour are those of the Trainer's :class:`~lightning_accel.habana.HPUFSDPStrategy` with
    Fabric's defaults (``state_dict_type="sharded"``) and without ``checkpoint_io`` (Fabric's FSDP writes its own
    files); a ``device_mesh=(replicas, shards)`` tuple is built on the HPUs. ``fabric.all_reduce`` supports sum,
    mean, min and max. A ``"sharded"`` checkpoint (a folder, one file per rank) is written aside and swapped in once
    every rank has written (:class:`~lightning_accel.core.checkpoint_swap.StagedFabricCheckpoints`); a ``"full"``
    one is one file written atomically by rank 0.
    Refused in lazy mode, as on Gaudi.

    Raises:
        ConfigurationError: For a ``state_dict_type`` other than ``"full"`` or ``"sharded"``, a precision plugin other
            than :class:`HPUFSDPPrecision` (or Fabric's for an accepted precision), a non-HPU accelerator, or the SDK in
            lazy mode.

    Example:
        >>> import torch
        >>> from lightning.fabric import Fabric
        >>> from lightning_accel.habana.fabric import HPUFSDPStrategy
        >>> strategy = HPUFSDPStrategy(auto_wrap_policy={torch.nn.Linear})
        >>> fabric = Fabric(accelerator="hpu", devices=2, strategy=strategy, precision="bf16-mixed")  # doctest: +SKIP
    """

    _precision_argument = "precision"
    _plugin_classes = (HPUFSDPPrecision, FSDPPrecision, Precision)
    precision = hpu_fsdp_precision("_precision")

    def _join_process_group(self) -> dict[str, Any]:
        self._setup_distributed()
        return self._fsdp_kwargs

    @override
    def save_checkpoint(
        self,
        path: PathType,
        state: dict[str, Any],
        storage_options: Any | None = None,
        filter: dict[str, Callable[[str, Any], bool]] | None = None,
    ) -> None:
        """Save the state; ``"full"`` is gathered to rank 0's host unit by unit and written atomically.

        The file is written by :class:`HPUCheckpointIO`; see ``_fsdp.full_state_dict_context`` for the gathering.

        Raises:
            TypeError: When ``storage_options`` is given.
            ValueError: When ``state`` does not hold exactly one module set up with FSDP.
            IsADirectoryError: When a full checkpoint would replace a directory.
        """
        if not self._full:
            super().save_checkpoint(path, state, storage_options=storage_options, filter=filter)
            return
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        if storage_options is not None:
            raise TypeError(
                f"HPUFSDPStrategy.save_checkpoint(..., storage_options={storage_options!r}) is not supported: FSDP "
                "writes its own files. Remove storage_options."
            )
        target = Path(self.broadcast(path))
        if target.is_dir():
            raise IsADirectoryError(
                f"The checkpoint path {str(target)!r} is a directory; state_dict_type='full' writes one file. Pass "
                "a file path, or remove the directory."
            )
        modules = [
            obj
            for obj in state.values()
            if isinstance(obj, torch.nn.Module) and any(isinstance(m, FSDP) for m in obj.modules())
        ]
        if len(modules) != 1:
            raise ValueError(
                f"The checkpoint state holds {len(modules)} modules set up with FSDP; a checkpoint holds exactly one. "
                "Pass it as save_checkpoint(path, state={'model': model, 'optimizer': optimizer, ...}) with the "
                "model returned by fabric.setup_module (save several models to several paths)."
            )
        full: dict[str, Any] = {}
        with full_state_dict_context(modules[0]):
            for key, obj in state.items():
                if isinstance(obj, torch.nn.Module):
                    converted = obj.state_dict()
                elif isinstance(obj, torch.optim.Optimizer):
                    converted = FSDP.optim_state_dict(modules[0], obj)
                elif hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
                    converted = obj.state_dict()
                else:
                    converted = obj
                keep = (filter or {}).get(key)
                if keep is not None and isinstance(converted, dict):
                    converted = {k: v for k, v in converted.items() if keep(k, v)}
                full[key] = converted
        if self.global_rank == 0:
            HPUCheckpointIO().save_checkpoint(full, target)

    @override
    def module_init_context(self, empty_init: bool | None = None) -> AbstractContextManager[Any]:
        """Modules made in this context are made on the HPU (on the meta device with ``empty_init``)."""
        stack = ExitStack()
        stack.enter_context(super().module_init_context(empty_init))
        if not empty_init:
            stack.enter_context(self.root_device)
        return stack
