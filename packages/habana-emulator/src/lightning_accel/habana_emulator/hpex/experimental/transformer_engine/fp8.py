"""Emulation of ``transformer_engine.fp8``: fp8 availability, ``fp8_autocast`` and the delayed-scaling update.

The public names are the SDK's, no more (gaudi-pytorch-bridge 1.18.0 ``f90046f``,
``hpex/experimental/transformer_engine/fp8.py``; from 1.19 the package re-exports the unpublished
``intel_transformer_engine``, ``transformer_engine/__init__.py:27-35``). Rule by rule:

- availability: the module-level function is ``check_fp8_support()`` (``:30-36``); it asks
  ``hpu.get_device_name()`` and answers ``(False, "FP8 not supported on Gaudi, Gaudi2 or higher required")`` on a
  first-generation Gaudi, ``(True, "")`` otherwise. ``is_fp8_available()`` exists only as the classmethod
  ``FP8GlobalStateManager.is_fp8_available()``, which caches that answer (``:57,74-78``). There is no module-level
  ``is_fp8_available``: code written for it fails on Gaudi with ``AttributeError``, and so it does here. Asking
  ``get_device_name()`` initialises the device on Gaudi (``hpu/__init__.py:121-142``); the emulated name carries
  ``" (emulated)"``, which the emulator drops before comparing;
- ``fp8_autocast(enabled=False, force_measurement=None, fp8_recipe=None, fp8_group=None)`` saves the global state,
  enters (recipe ``DelayedScaling()`` when none is given; with ``enabled=True`` it asserts ``is_fp8_available()``
  with its reason) and restores the state on exit (``:476-516``, ``fp8_autocast_enter`` ``:120-143``);
- the scale update, ``amax_and_scale_update(fp8_meta, fwd_update, perform_scale_update)`` (``:612-656``): for the
  forward (and, in HYBRID, the hybrid) or the backward scaling group of ``fp8_meta``, the amax is the largest of
  the history (``"max"``) or the latest row (``"most_recent"``), or the recipe's function of the history; the new
  scale is ``2 ** (floor(log2(fp8_max / amax)) - margin)`` (a power of two, so scaling adds no rounding), the old
  scale where the amax is 0, or the recipe's ``scaling_factor_compute_algo``; ``scale_inv = 1 / scale``; then
  ``update_amax_history_index`` moves the history index on when ``amax_history_len > 1`` (``:606-609``);
- ``get_fp8_te_dtype``: ``float8_e4m3fn`` for E4M3 and HYBRID's forward tensors, ``float8_e5m2`` otherwise;
  ``get_fp8_te_sr``: stochastic rounding only for backward tensors, for HYBRID, unless ``PT_TE_FORCE_SR_BWD`` says
  otherwise (``:659-675``); ``set_measurement_mode(manual, manual_value=True)`` forces or frees amax measurement.

Where the emulator differs: the SDK's ``"most_recent"`` reads row 0 of its circular history (``_default_get_amax``,
``:525-535``), which is the latest row only when ``amax_history_len == 1``; the emulator reads the row written last,
as the recipe's documentation says. The SDK reduces all modules' amaxes in one collective from
``FP8GlobalStateManager.global_fp8_buffer``; the emulated ``Linear`` reduces each layer's own (the same values, more
collectives).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Any, ClassVar

import torch

from .constants import dist_group_type
from .recipe import DelayedScaling, Format

__all__ = [
    "DelayedScaling",
    "FP8GlobalStateManager",
    "Format",
    "MetaTensorType",
    "amax_and_scale_update",
    "check_fp8_support",
    "dist_group_type",
    "fp8_autocast",
    "get_default_fp8_recipe",
    "get_fp8_te_dtype",
    "get_fp8_te_sr",
    "set_measurement_mode",
    "update_amax_history_index",
]

_NO_FP8 = "FP8 not supported on Gaudi, Gaudi2 or higher required"
_EMULATED_SUFFIX = " (emulated)"


def check_fp8_support() -> tuple[bool, str]:
    """``(True, "")`` from Gaudi2 on; ``(False, reason)`` on first-generation Gaudi (asks the device's name)."""
    from ....hpu import get_device_name

    name = str(get_device_name())
    if name.endswith(_EMULATED_SUFFIX):
        name = name[: -len(_EMULATED_SUFFIX)]
    if name == "GAUDI":
        return False, _NO_FP8
    return True, ""


def get_default_fp8_recipe() -> DelayedScaling:
    """The recipe used when ``fp8_autocast`` is given none: ``DelayedScaling()``."""
    return DelayedScaling()


def get_fp8_te_dtype(fp8_recipe: DelayedScaling, fprop_tensor: bool = True) -> torch.dtype:
    """The fp8 dtype of a forward (``fprop_tensor``) or backward tensor under ``fp8_recipe``."""
    if fp8_recipe.fp8_format == Format.E4M3 or (fp8_recipe.fp8_format == Format.HYBRID and fprop_tensor):
        return torch.float8_e4m3fn
    return torch.float8_e5m2


def get_fp8_te_sr(fp8_recipe: DelayedScaling, fprop_tensor: bool = True) -> bool:
    """Whether a cast rounds stochastically: backward tensors of HYBRID, unless ``PT_TE_FORCE_SR_BWD`` is set."""
    if fprop_tensor:
        return False
    forced = os.getenv("PT_TE_FORCE_SR_BWD")
    if forced is not None:
        return forced.lower() in ("true", "1")
    return fp8_recipe.fp8_format == Format.HYBRID


class MetaTensorType(Enum):
    """The scaling groups of a layer's ``fp8_meta``: forward, hybrid (E5M2 copies for the backward), backward."""

    FORWARD = 0
    HYBRID = 1
    BACKWARD = 2


_META_KEYS = {MetaTensorType.FORWARD: "fwd", MetaTensorType.HYBRID: "hybrid", MetaTensorType.BACKWARD: "bwd"}
# The tensors of a scaling group, in the order the recompute stash keeps them.
_META_FIELDS = ("amax_history", "amax_history_index", "scale", "scale_inv")


class FP8GlobalStateManager:
    """The process-wide fp8 state: what the innermost ``fp8_autocast`` set, and the availability answer.

    Example:
        >>> from habana_frameworks.torch.hpex.experimental.transformer_engine.fp8 import FP8GlobalStateManager
        >>> FP8GlobalStateManager.is_fp8_available()  # doctest: +SKIP
        (True, '')
    """

    FP8_ENABLED: ClassVar[bool] = False
    FP8_RECIPE: ClassVar[DelayedScaling | None] = None
    FP8_DISTRIBUTED_GROUP: ClassVar[Any] = None
    IS_FIRST_FP8_MODULE: ClassVar[bool] = False
    FP8_AUTOCAST_COUNTER: ClassVar[int] = 0
    FP8_CURRENT_CONTEXT_ID: ClassVar[int] = 0
    FP8_AUTOCAST_DEPTH: ClassVar[int] = 0
    FP8_MANUAL_MEASUREMENT: ClassVar[bool | None] = None
    global_fp8_buffer: ClassVar[dict[str, list[torch.Tensor]]] = {}
    fp8_tensors_recompute_buffer: ClassVar[list[deque[list[torch.Tensor]]]] = []
    buffer_delete_key_fwd: ClassVar[str | None] = None
    buffer_delete_key_bwd: ClassVar[str | None] = None
    fp8_available: ClassVar[bool | None] = None
    reason_for_no_fp8: ClassVar[str] = ""

    @classmethod
    def is_fp8_available(cls) -> tuple[bool, str]:
        """:func:`check_fp8_support`'s answer, asked once per process."""
        if cls.fp8_available is None:
            cls.fp8_available, cls.reason_for_no_fp8 = check_fp8_support()
        return bool(cls.fp8_available), cls.reason_for_no_fp8

    @classmethod
    def get_fp8_autocast_state(cls) -> tuple[bool, DelayedScaling | None, Any, bool]:
        """``(enabled, recipe, group, is_first_module)`` of the innermost ``fp8_autocast``."""
        return (cls.FP8_ENABLED, cls.FP8_RECIPE, cls.FP8_DISTRIBUTED_GROUP, cls.IS_FIRST_FP8_MODULE)

    @classmethod
    def set_fp8_autocast_state(cls, fp8_state: tuple[bool, DelayedScaling | None, Any, bool]) -> None:
        """Restore what :meth:`get_fp8_autocast_state` returned."""
        cls.FP8_ENABLED, cls.FP8_RECIPE, cls.FP8_DISTRIBUTED_GROUP, cls.IS_FIRST_FP8_MODULE = fp8_state

    @classmethod
    def fp8_autocast_enter(
        cls,
        enabled: bool = False,
        force_measurement: bool | None = None,
        fp8_recipe: DelayedScaling | None = None,
        fp8_group: Any = None,
    ) -> None:
        """Enter an fp8 region: set the state; with ``enabled=True`` assert that the device has fp8."""
        cls.FP8_ENABLED = enabled
        cls.FP8_RECIPE = get_default_fp8_recipe() if fp8_recipe is None else fp8_recipe
        cls.FP8_DISTRIBUTED_GROUP = fp8_group
        if cls.FP8_AUTOCAST_DEPTH == 0:
            cls.IS_FIRST_FP8_MODULE = True
            cls.FP8_AUTOCAST_COUNTER += 1
            cls.FP8_MANUAL_MEASUREMENT = force_measurement
        cls.FP8_AUTOCAST_DEPTH += 1
        if enabled:
            available, reason = cls.is_fp8_available()
            assert available, reason

    @classmethod
    def fp8_autocast_exit(cls) -> None:
        """Leave an fp8 region."""
        cls.FP8_AUTOCAST_DEPTH -= 1

    @classmethod
    def is_fp8_enabled(cls) -> bool:
        """Whether the innermost ``fp8_autocast`` enabled fp8."""
        return cls.FP8_ENABLED

    @classmethod
    def get_fp8_recipe(cls) -> DelayedScaling | None:
        """The recipe of the innermost ``fp8_autocast``."""
        return cls.FP8_RECIPE

    @classmethod
    def get_fp8_group(cls) -> Any:
        """The process group amaxes are reduced over (``None``: the default group)."""
        return cls.FP8_DISTRIBUTED_GROUP

    @classmethod
    def get_manual_measurement_mode(cls) -> bool | None:
        """``force_measurement`` of the outermost ``fp8_autocast``, or what :func:`set_measurement_mode` set."""
        return cls.FP8_MANUAL_MEASUREMENT

    @classmethod
    def set_measurement_mode(cls, manual: bool, manual_value: bool = True) -> None:
        """Force amax measurement on or off (``manual=True``), or leave it to the recipe's interval."""
        cls.FP8_MANUAL_MEASUREMENT = manual_value if manual else None

    @classmethod
    def is_first_fp8_module(cls) -> bool:
        """``True`` for the first caller inside an ``fp8_autocast`` region, ``False`` after."""
        first = cls.IS_FIRST_FP8_MODULE
        cls.IS_FIRST_FP8_MODULE = False
        return first

    @classmethod
    def get_fp8_context_id(cls) -> int:
        """The id of the current fp8 context."""
        return cls.FP8_CURRENT_CONTEXT_ID

    @classmethod
    def set_fp8_context_id(cls, ctx_id: int) -> None:
        """Set the id of the current fp8 context."""
        cls.FP8_CURRENT_CONTEXT_ID = ctx_id

    @classmethod
    def new_fp8_context_id(cls) -> int:
        """The autocast counter, which names a new fp8 context."""
        return cls.FP8_AUTOCAST_COUNTER

    @classmethod
    def set_fp8_autocast_counter(cls, value: int = 0) -> None:
        """Set how many outermost ``fp8_autocast`` regions were entered."""
        cls.FP8_AUTOCAST_COUNTER = value

    @classmethod
    def clear_global_fp8_buffer(cls) -> None:
        """Empty the global amax buffer."""
        cls.global_fp8_buffer.clear()

    @classmethod
    def reset_global_state(cls) -> None:
        """Zero the autocast counter and empty the global amax buffer."""
        cls.set_fp8_autocast_counter(0)
        cls.clear_global_fp8_buffer()

    @staticmethod
    def get_meta_tensor_key(t: MetaTensorType) -> str:
        """The key of a scaling group in ``fp8_meta``: ``"scaling_fwd"``, ``"scaling_hybrid"``, ``"scaling_bwd"``."""
        assert isinstance(t, MetaTensorType)
        return f"scaling_{_META_KEYS[t]}"

    @classmethod
    def get_meta_tensor_key_bool(cls, forward: bool = True) -> str:
        """``"scaling_fwd"`` or ``"scaling_bwd"``."""
        return cls.get_meta_tensor_key(MetaTensorType.FORWARD if forward else MetaTensorType.BACKWARD)

    @staticmethod
    def get_fp8_max_key(t: MetaTensorType) -> str:
        """The key of the largest representable value for a scaling group: ``"fp8_max_fwd"`` or ``"fp8_max_bwd"``."""
        return "fp8_max_fwd" if t == MetaTensorType.FORWARD else "fp8_max_bwd"

    @staticmethod
    def get_key_suffix(t: MetaTensorType) -> str:
        """``"fwd"``, ``"hybrid"`` or ``"bwd"``."""
        return _META_KEYS[t]

    @staticmethod
    def is_forward(t: MetaTensorType) -> bool:
        """Whether a scaling group belongs to the forward pass (forward and hybrid)."""
        return t in (MetaTensorType.FORWARD, MetaTensorType.HYBRID)

    @classmethod
    def is_hybrid_mode(cls, fp8_meta: dict[str, Any]) -> bool:
        """Whether ``fp8_meta`` has a hybrid scaling group (the HYBRID format)."""
        return cls.get_meta_tensor_key(MetaTensorType.HYBRID) in fp8_meta

    @staticmethod
    def get_buffer_position_key(forward: bool = True) -> str:
        """The key of a layer's position in the global amax buffer, in its ``fp8_meta``."""
        return "global_fp8_buffer_pos_fwd" if forward else "global_fp8_buffer_pos_bwd"

    @staticmethod
    def get_autocast_key(forward: bool = True) -> str:
        """The key of the autocast id in a layer's ``fp8_meta``."""
        return "autocast_id_fwd" if forward else "autocast_id_bwd"

    @staticmethod
    def get_run_id_key(forward: bool = True) -> str:
        """The key of the run id in a layer's ``fp8_meta``."""
        return "run_id_fwd" if forward else "run_id_bwd"

    @classmethod
    def get_amax_buffer_key(cls, fp8_meta: dict[str, Any], forward: bool = True) -> str:
        """The key of a run's amaxes in the global buffer: ``FWD_AMAX_<run id>`` or ``BWD_AMAX_<run id>``."""
        return f"{'FWD' if forward else 'BWD'}_AMAX_{fp8_meta[cls.get_run_id_key(forward)]}"

    @classmethod
    def _latest_amax(cls, fp8_meta: dict[str, Any], forward: bool) -> torch.Tensor:
        meta = fp8_meta[cls.get_meta_tensor_key_bool(forward)]
        return meta.amax_history[meta.amax_history_index][0]

    @classmethod
    def add_amax_to_global_buffer(cls, fp8_meta: dict[str, Any], forward: bool = True) -> None:
        """Append the layer's latest amaxes to its run's list in the global buffer; remember its position."""
        entries = cls.global_fp8_buffer.setdefault(cls.get_amax_buffer_key(fp8_meta, forward), [])
        entries.append(cls._latest_amax(fp8_meta, forward))
        fp8_meta.setdefault(cls.get_buffer_position_key(forward), len(entries) - 1)

    @classmethod
    def copy_amax_from_global_buffer(cls, fp8_meta: dict[str, Any], forward: bool = True) -> None:
        """Write the (reduced) amaxes of the layer's position back into its history (and the hybrid group's)."""
        position_key = cls.get_buffer_position_key(forward)
        if position_key not in fp8_meta:
            return
        key = cls.get_amax_buffer_key(fp8_meta, forward)
        assert key in cls.global_fp8_buffer, "TE internal error."
        amax = cls.global_fp8_buffer[key][fp8_meta[position_key]]
        targets = [cls.get_meta_tensor_key_bool(forward)]
        if forward and cls.is_hybrid_mode(fp8_meta):
            targets.append(cls.get_meta_tensor_key(MetaTensorType.HYBRID))
        for target in targets:
            meta = fp8_meta[target]
            meta.amax_history[meta.amax_history_index] = amax

    @classmethod
    def set_amax_buffer_key_deletion(cls, fp8_meta: dict[str, Any], forward: bool = True) -> None:
        """Mark the layer's run key for deletion from the global buffer when the autocast region ends."""
        if cls.get_run_id_key(forward) not in fp8_meta:
            return
        key = cls.get_amax_buffer_key(fp8_meta, forward)
        if forward:
            cls.buffer_delete_key_fwd = key
        else:
            cls.buffer_delete_key_bwd = key

    @classmethod
    def delete_key_from_amax_buffer(cls, forward: bool = True) -> None:
        """Delete the key marked by :meth:`set_amax_buffer_key_deletion` from the global buffer."""
        key = cls.buffer_delete_key_fwd if forward else cls.buffer_delete_key_bwd
        if key is not None and key in cls.global_fp8_buffer:
            del cls.global_fp8_buffer[key]
            if forward:
                cls.buffer_delete_key_fwd = None
            else:
                cls.buffer_delete_key_bwd = None

    @classmethod
    def global_amax_reduction(
        cls,
        fp8_meta: dict[str, Any],
        reduce_amax_across_tp_group: bool = False,
        tp_group: Any = None,
        forward: bool = True,
    ) -> None:
        """Reduce (``MAX``) the run's amaxes of every layer in one collective over ``fp8_meta["fp8_group"]``."""
        key = cls.get_amax_buffer_key(fp8_meta, forward)
        if key not in cls.global_fp8_buffer:
            return
        parts = cls.global_fp8_buffer[key]
        joined = torch.cat(parts)
        cls.reduce_tensor_across_group_op_max(joined, fp8_meta["fp8_group"])
        if reduce_amax_across_tp_group:
            cls.reduce_tensor_across_group_op_max(joined, tp_group)
        cls.global_fp8_buffer[key] = list(joined.split([part.numel() for part in parts]))

    @classmethod
    def get_global_fp8_state_checkpoint(cls) -> dict[str, Any]:
        """The global counters and flags, for a checkpoint."""
        return {
            "FP8_AUTOCAST_COUNTER": cls.FP8_AUTOCAST_COUNTER,
            "FP8_CURRENT_CONTEXT_ID": cls.FP8_CURRENT_CONTEXT_ID,
            "FP8_AUTOCAST_DEPTH": cls.FP8_AUTOCAST_DEPTH,
            "FP8_MANUAL_MEASUREMENT": cls.FP8_MANUAL_MEASUREMENT,
            "buffer_delete_key_fwd": cls.buffer_delete_key_fwd,
            "buffer_delete_key_bwd": cls.buffer_delete_key_bwd,
        }

    @classmethod
    def set_global_fp8_state_checkpoint(cls, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_global_fp8_state_checkpoint` returned (unknown keys are ignored)."""
        for name, value in state.items():
            if hasattr(cls, name):
                setattr(cls, name, value)

    @classmethod
    def get_global_fp8_buffer_checkpoint(cls) -> dict[str, list[torch.Tensor]]:
        """The global amax buffer, for a checkpoint."""
        return cls.global_fp8_buffer

    @classmethod
    def set_global_fp8_buffer_checkpoint(cls, buffer: dict[str, list[torch.Tensor]]) -> None:
        """Restore the global amax buffer, its tensors moved to the HPU."""
        for key, tensors in buffer.items():
            buffer[key] = [tensor.to("hpu") for tensor in tensors]
        cls.global_fp8_buffer = buffer

    @classmethod
    def copy_forward_fp8_meta_tensors_for_recompute(cls, fp8_meta: dict[str, Any]) -> None:
        """Stash copies of the forward scaling state, so that a recomputed forward uses the same scales."""
        stash: list[torch.Tensor] = []
        kinds = [MetaTensorType.FORWARD] + ([MetaTensorType.HYBRID] if cls.is_hybrid_mode(fp8_meta) else [])
        for kind in kinds:
            meta = fp8_meta[cls.get_meta_tensor_key(kind)]
            stash += [t.clone() for t in (meta.amax_history, meta.amax_history_index, meta.scale, meta.scale_inv)]
        position_key = "global_fp8_buffer_pos_fwd_recompute"
        if position_key not in fp8_meta:
            cls.fp8_tensors_recompute_buffer.append(deque())
            fp8_meta[position_key] = len(cls.fp8_tensors_recompute_buffer) - 1
        cls.fp8_tensors_recompute_buffer[fp8_meta[position_key]].append(stash)

    @classmethod
    def get_old_fp8_meta_tensors_for_recompute(cls, fp8_meta: dict[str, Any]) -> None:
        """Keep the current forward scaling state aside and switch to the one stashed before the first forward."""
        stash = cls.fp8_tensors_recompute_buffer[fp8_meta["global_fp8_buffer_pos_fwd_recompute"]].popleft()
        kinds = [MetaTensorType.FORWARD] + ([MetaTensorType.HYBRID] if cls.is_hybrid_mode(fp8_meta) else [])
        for number, kind in enumerate(kinds):
            meta = fp8_meta[cls.get_meta_tensor_key(kind)]
            suffix = cls.get_key_suffix(kind)
            for name in _META_FIELDS:
                fp8_meta[f"updated_{name}_{suffix}"] = getattr(meta, name)
            for name, value in zip(_META_FIELDS, stash[4 * number : 4 * number + 4], strict=True):
                setattr(meta, name, value)

    @classmethod
    def restore_fp8_meta_tensors(cls, fp8_meta: dict[str, Any]) -> None:
        """Switch back to the scaling state kept aside by :meth:`get_old_fp8_meta_tensors_for_recompute`."""
        kinds = [MetaTensorType.FORWARD] + ([MetaTensorType.HYBRID] if cls.is_hybrid_mode(fp8_meta) else [])
        for kind in kinds:
            meta = fp8_meta[cls.get_meta_tensor_key(kind)]
            suffix = cls.get_key_suffix(kind)
            for name in _META_FIELDS:
                setattr(meta, name, fp8_meta[f"updated_{name}_{suffix}"])

    @staticmethod
    def reduce_tensor_across_group_op_max(tensor: torch.Tensor, group: Any) -> None:
        """All-reduce ``tensor`` with ``MAX`` over ``group`` when ``torch.distributed`` is initialised."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX, group=group)


@contextmanager
def fp8_autocast(
    enabled: bool = False,
    force_measurement: bool | None = None,
    fp8_recipe: DelayedScaling | None = None,
    fp8_group: Any = None,
) -> Iterator[None]:
    """Run Transformer Engine modules in fp8 inside the block (``enabled=True``).

    Args:
        enabled: Whether the modules compute in fp8.
        force_measurement: Measure amaxes in every step (``True``), never (``False``), or as the recipe's interval
            says (``None``).
        fp8_recipe: The scaling recipe; ``DelayedScaling()`` when ``None``.
        fp8_group: The process group amaxes are reduced over (the default group when ``None``).

    Raises:
        AssertionError: With ``enabled=True`` on a device without fp8, with the SDK's reason.

    Example:
        >>> import habana_frameworks.torch.hpex.experimental.transformer_engine as te
        >>> with te.fp8_autocast(enabled=True):  # doctest: +SKIP
        ...     out = layer(x)
    """
    state = FP8GlobalStateManager.get_fp8_autocast_state()
    try:
        FP8GlobalStateManager.fp8_autocast_enter(enabled, force_measurement, fp8_recipe, fp8_group)
        yield
    finally:
        FP8GlobalStateManager.set_fp8_autocast_state(state)
        FP8GlobalStateManager.fp8_autocast_exit()


def set_measurement_mode(manual: bool, manual_value: bool = True) -> None:
    """Force amax measurement on or off (``manual=True``), or leave it to the recipe's interval."""
    FP8GlobalStateManager.set_measurement_mode(manual, manual_value)


def update_amax_history_index(fp8_meta: dict[str, Any], fp8_meta_tensor_key: str) -> None:
    """Move the history index of ``fp8_meta[fp8_meta_tensor_key]`` to the next row (``amax_history_len > 1``)."""
    history_len = fp8_meta["recipe"].amax_history_len
    if history_len > 1:
        meta = fp8_meta[fp8_meta_tensor_key]
        meta.amax_history_index.add_(1).remainder_(history_len)


def _amax(history: torch.Tensor, latest_row: int, recipe: DelayedScaling) -> torch.Tensor:
    if callable(recipe.amax_compute_algo):
        return torch.as_tensor(recipe.amax_compute_algo(history))
    if recipe.amax_compute_algo == "max":
        return history.max(dim=0).values
    return history[latest_row]


def _scale(amax: torch.Tensor, scale: torch.Tensor, fp8_max: float, recipe: DelayedScaling) -> torch.Tensor:
    if recipe.scaling_factor_compute_algo is not None:
        return torch.as_tensor(recipe.scaling_factor_compute_algo(amax, scale, fp8_max, recipe))
    exponent = torch.floor(torch.log2(fp8_max / amax)) - recipe.margin
    return torch.where(amax > 0.0, torch.pow(2.0, exponent), scale)


def amax_and_scale_update(fp8_meta: dict[str, Any], fwd_update: bool, perform_scale_update: bool) -> None:
    """After a measured step: recompute the scales of a layer's forward or backward groups, move their history on.

    Args:
        fp8_meta: The layer's ``fp8_meta`` (``"recipe"``, ``"fp8_max_fwd"``, ``"fp8_max_bwd"`` and the scaling
            groups).
        fwd_update: The forward group (and the hybrid one in HYBRID) when ``True``, else the backward group.
        perform_scale_update: Recompute the scales (else only move the history on).
    """
    recipe: DelayedScaling = fp8_meta["recipe"]
    if fwd_update:
        kinds = [MetaTensorType.FORWARD]
        if FP8GlobalStateManager.is_hybrid_mode(fp8_meta):
            kinds.append(MetaTensorType.HYBRID)
    else:
        kinds = [MetaTensorType.BACKWARD]
    for kind in kinds:
        key = FP8GlobalStateManager.get_meta_tensor_key(kind)
        meta = fp8_meta[key]
        if perform_scale_update:
            amax = _amax(meta.amax_history, int(meta.amax_history_index[0]), recipe)
            fp8_max = fp8_meta[FP8GlobalStateManager.get_fp8_max_key(kind)]
            meta.scale = _scale(amax, meta.scale, fp8_max, recipe).to(torch.float32)
            meta.scale_inv = torch.reciprocal(meta.scale)
        update_amax_history_index(fp8_meta, key)
