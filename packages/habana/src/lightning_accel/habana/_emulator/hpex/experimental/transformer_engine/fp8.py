"""Emulation of ``transformer_engine.fp8``: fp8 availability, ``fp8_autocast`` and the delayed-scaling update.

Sources (gaudi-pytorch-bridge 1.18.0, ``hpex/experimental/transformer_engine/fp8.py``), rule by rule:

- ``is_fp8_available()`` returns ``(False, "FP8 not supported on Gaudi, Gaudi2 or higher required")`` on
  first-generation Gaudi and ``(True, "")`` otherwise, computed once. The SDK compares ``get_device_name()`` with
  ``"GAUDI"``; the emulated name carries ``" (emulated)"``, so the emulator asks ``_get_device_type()`` (the same
  generation, ``LIGHTNING_ACCEL_EMULATE_HPU_TYPE``);
- ``fp8_autocast(enabled=False, force_measurement=None, fp8_recipe=None, fp8_group=None)`` sets the fp8 state for
  the block (restored on exit, nestable), uses ``DelayedScaling()`` when no recipe is given, and with
  ``enabled=True`` asserts ``is_fp8_available()`` with its reason;
- the scale update (``amax_and_scale_update``, ``_default_get_amax``, ``_default_sf_compute``): the amax is the
  largest of the history (``"max"``) or the latest (``"most_recent"``), the new scale is
  ``2 ** (floor(log2(fp8_max / amax)) - margin)`` (a power of two, so scaling adds no rounding), the old scale where
  the amax is 0, and ``scale_inv = 1 / scale``; the history index then moves on when ``amax_history_len > 1``;
- ``get_fp8_te_dtype``: ``float8_e4m3fn`` for HYBRID's forward tensors, ``float8_e5m2`` otherwise; ``get_fp8_te_sr``:
  stochastic rounding only for backward tensors, for HYBRID, unless ``PT_TE_FORCE_SR_BWD`` says otherwise;
- with ``reduce_amax`` and ``torch.distributed`` initialised, amaxes are reduced with ``MAX`` over ``fp8_group``.

Where the emulator differs: the SDK's ``"most_recent"`` reads row 0 of its circular history (``amax_history[0]``),
which is the latest row only when ``amax_history_len == 1``; the emulator reads the row written last, as the recipe's
documentation says. The SDK reduces all modules' amaxes in one collective from a global buffer; the emulator reduces
each module's own (the same values, more collectives).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .recipe import DelayedScaling, Format

__all__ = [
    "FP8TensorMeta",
    "amax_and_scale_update",
    "fp8_autocast",
    "get_default_fp8_recipe",
    "get_fp8_group",
    "get_fp8_recipe",
    "get_fp8_te_dtype",
    "get_fp8_te_sr",
    "is_fp8_available",
    "is_fp8_enabled",
]

_FP8_ENABLED = False
_FP8_RECIPE: DelayedScaling | None = None
_FP8_DISTRIBUTED_GROUP: Any = None
_availability: tuple[bool, str] | None = None


def _check_fp8_support() -> tuple[bool, str]:
    from ....utils.experimental import _get_device_type, synDeviceType

    if _get_device_type() == synDeviceType.synDeviceGaudi:
        return False, "FP8 not supported on Gaudi, Gaudi2 or higher required"
    return True, ""


def is_fp8_available() -> tuple[bool, str]:
    """``(True, "")`` from Gaudi2 on; ``(False, reason)`` on first-generation Gaudi."""
    global _availability
    if _availability is None:
        _availability = _check_fp8_support()
    return _availability


def get_default_fp8_recipe() -> DelayedScaling:
    """The recipe used when ``fp8_autocast`` is given none: ``DelayedScaling()``."""
    return DelayedScaling()


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
        force_measurement: Accepted for the SDK's signature; the emulator measures amaxes in every training step.
        fp8_recipe: The scaling recipe; ``DelayedScaling()`` when ``None``.
        fp8_group: The process group amaxes are reduced over (the default group when ``None``).

    Raises:
        AssertionError: With ``enabled=True`` on a device without fp8, with the SDK's reason.
    """
    global _FP8_ENABLED, _FP8_RECIPE, _FP8_DISTRIBUTED_GROUP
    saved = (_FP8_ENABLED, _FP8_RECIPE, _FP8_DISTRIBUTED_GROUP)
    try:
        _FP8_ENABLED = enabled
        _FP8_RECIPE = get_default_fp8_recipe() if fp8_recipe is None else fp8_recipe
        _FP8_DISTRIBUTED_GROUP = fp8_group
        if enabled:
            available, reason = is_fp8_available()
            assert available, reason
        yield
    finally:
        _FP8_ENABLED, _FP8_RECIPE, _FP8_DISTRIBUTED_GROUP = saved


def is_fp8_enabled() -> bool:
    """Whether the innermost ``fp8_autocast`` enabled fp8."""
    return _FP8_ENABLED


def get_fp8_recipe() -> DelayedScaling:
    """The recipe of the innermost ``fp8_autocast`` (the default recipe outside one)."""
    return _FP8_RECIPE if _FP8_RECIPE is not None else get_default_fp8_recipe()


def get_fp8_group() -> Any:
    """The process group of the innermost ``fp8_autocast``."""
    return _FP8_DISTRIBUTED_GROUP


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


class FP8TensorMeta:
    """The scaling state of a group of fp8 tensors (one column per tensor), as the SDK's ``FP8TensorMeta``.

    Attributes:
        scale: The factor each tensor is multiplied by before its cast, shape ``(n,)``, starting at 1.
        scale_inv: ``1 / scale``, applied after the fp8 product.
        amax_history: The absolute maxima seen, shape ``(amax_history_len, n)``, a circular buffer.
        amax_history_index: The row the next amaxes go to (a one-element int32 tensor, as the SDK keeps it).
    """

    def __init__(self, num_tensors: int, history_len: int, device: torch.device | str) -> None:
        self.scale = torch.ones(num_tensors, dtype=torch.float32, device=device)
        self.scale_inv = torch.ones(num_tensors, dtype=torch.float32, device=device)
        self.amax_history = torch.zeros(history_len, num_tensors, dtype=torch.float32, device=device)
        self.amax_history_index = torch.zeros(1, dtype=torch.int32, device=device)

    @property
    def row(self) -> int:
        """The current row of the history."""
        return int(self.amax_history_index[0])

    def record(self, column: int, tensor: torch.Tensor) -> None:
        """Store ``tensor``'s absolute maximum in the current row of the history."""
        self.amax_history[self.row, column] = tensor.detach().abs().max().float()


def _amax(history: torch.Tensor, latest_row: int, recipe: DelayedScaling) -> torch.Tensor:
    if callable(recipe.amax_compute_algo):
        return torch.as_tensor(recipe.amax_compute_algo(history))
    if recipe.amax_compute_algo == "max":
        return history.max(dim=0).values
    return history[latest_row]


def amax_and_scale_update(meta: FP8TensorMeta, fp8_max: float, recipe: DelayedScaling, update_scale: bool) -> None:
    """After a measured step: reduce the amaxes, recompute the scales (when ``update_scale``), move the history on."""
    row = meta.row
    if recipe.reduce_amax and torch.distributed.is_available() and torch.distributed.is_initialized():
        latest = meta.amax_history[row].clone()
        torch.distributed.all_reduce(latest, op=torch.distributed.ReduceOp.MAX, group=get_fp8_group())
        meta.amax_history[row] = latest
    if update_scale:
        amax = _amax(meta.amax_history, row, recipe)
        if recipe.scaling_factor_compute_algo is not None:
            scale = recipe.scaling_factor_compute_algo(amax, meta.scale, fp8_max, recipe)
        else:
            exponent = torch.floor(torch.log2(fp8_max / amax)) - recipe.margin
            scale = torch.where(amax > 0.0, torch.pow(2.0, exponent), meta.scale)
        meta.scale = scale.to(torch.float32)
        meta.scale_inv = torch.reciprocal(meta.scale)
    if recipe.amax_history_len > 1:
        meta.amax_history_index.fill_((row + 1) % recipe.amax_history_len)
