"""Emulation of ``transformer_engine.module.base``: what every Transformer Engine layer shares (delayed scaling).

Source: gaudi-pytorch-bridge 1.18.0, ``hpex/experimental/transformer_engine/module/base.py``. A layer keeps its fp8
state in ``fp8_meta`` under the SDK's keys (``"recipe"``, ``"fp8_max_fwd"``, ``"fp8_max_bwd"``, ``"scaling_fwd"``
with two columns per GEMM, ``"scaling_bwd"`` with one, ``"scaling_hybrid"`` for HYBRID), and each forward runs inside
:meth:`TransformerEngineBaseModule.prepare_forward`, rule by rule:

- ``fp8_init`` reads ``fp8_autocast``'s state; a new recipe starts the scaling state afresh;
- a training forward first updates the forward scales from the amaxes the previous measured forward recorded
  (``amax_and_scale_update``; the amaxes reduced over the fp8 group first when ``reduce_amax``), the next backward
  the backward scales (``_prepare_backward``); scales are recomputed when ``interval == 1`` or every ``interval``
  runs (``is_scale_update_required``), and amaxes are measured in the last ``amax_history_len`` runs of each interval
  or as ``fp8_autocast(force_measurement=...)`` says (``get_amax_measure_state``). Evaluation measures nothing;
- under activation checkpointing (``distributed.checkpoint``) the first run measures with gradients off and stashes
  its forward scaling state; the recompute uses the stashed state, records nothing and is not a run of its own;
- the state is saved in the module's extra state, so a checkpoint resumes with its scales.

Where the emulator differs: the SDK gathers the amaxes of all layers into ``FP8GlobalStateManager``'s global buffer
and reduces them in one collective per step; the emulator reduces each layer's own (the same values, more
collectives). It keeps no fp8 copies of the weights across micro-batches (``set_fp8_weights`` has nothing to create,
``get_fp8_weights_scratchpad`` returns none): the weight is cast in every forward, which gives the same numbers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .._cast import dequantize as _dequantize
from .._cast import quantize as _quantize
from ..constants import dist_group_type
from ..cpp_extensions import cast_to_fp8 as cast_to_fp8
from ..cpp_extensions import cast_to_fp8_hybrid as cast_to_fp8_hybrid
from ..cpp_extensions import fp8_gemm as fp8_gemm
from ..distributed import gather_along_first_dim as gather_along_first_dim
from ..distributed import in_fp8_activation_recompute_phase as in_fp8_activation_recompute_phase
from ..distributed import is_fp8_activation_recompute_enabled
from ..distributed import set_fp8_activation_recompute_phase as set_fp8_activation_recompute_phase
from ..fp8 import FP8GlobalStateManager, MetaTensorType, amax_and_scale_update, get_fp8_te_dtype, get_fp8_te_sr
from ..fp8 import get_default_fp8_recipe as get_default_fp8_recipe
from ..recipe import DelayedScaling as _DelayedScaling
from ..recipe import Format as _Format
from ..utils import FP8BwdTensors, FP8TensorMeta
from ..utils import FP8FwdTensors as FP8FwdTensors

__all__ = ["MODULE_CNT", "TransformerEngineBaseModule"]

# How many Transformer Engine layers were made: the SDK names each layer by its number.
MODULE_CNT = 0


def _row(meta: FP8TensorMeta) -> int:
    return int(meta.amax_history_index.reshape(-1)[0])


def _record(meta: FP8TensorMeta, column: int, tensor: torch.Tensor) -> None:
    # The amax of this step goes to the current row of the circular history.
    meta.amax_history[_row(meta), column] = tensor.detach().abs().max().float()


def _update(fp8_meta: dict[str, Any], forward: bool, perform_scale_update: bool) -> None:
    """Reduce the latest amaxes over the fp8 group (``reduce_amax``), then the SDK's scale update."""
    if fp8_meta["recipe"].reduce_amax:
        keys = ["scaling_fwd", "scaling_hybrid"] if forward else ["scaling_bwd"]
        for key in keys:
            meta = fp8_meta.get(key)
            if meta is not None:
                latest = meta.amax_history[_row(meta)].clone()
                FP8GlobalStateManager.reduce_tensor_across_group_op_max(latest, fp8_meta.get("fp8_group"))
                meta.amax_history[_row(meta)] = latest
    amax_and_scale_update(fp8_meta, forward, perform_scale_update)


def _prepare_backward(fp8_meta: dict[str, Any]) -> None:
    # The backward scales follow the amaxes the previous measured backward recorded.
    if fp8_meta.get("bwd_measured", False):
        _update(fp8_meta, False, fp8_meta["is_scale_update_required"])
    fp8_meta["bwd_measured"] = True


class TransformerEngineBaseModule(torch.nn.Module, ABC):
    """The base of the Transformer Engine layers: their fp8 state and the delayed scaling around each forward.

    Example:
        >>> import habana_frameworks.torch.hpex.experimental.transformer_engine as te
        >>> isinstance(te.Linear(8, 8), te.module.base.TransformerEngineBaseModule)  # doctest: +SKIP
        True
    """

    def __init__(self) -> None:
        super().__init__()
        global MODULE_CNT
        self.name = str(MODULE_CNT)
        MODULE_CNT += 1
        self.fp8 = False
        self.fp8_meta: dict[str, Any] = {"in_activation_recompute_phase": False}
        self.fp8_meta_tensors_initialized = False
        self.run_cnt = 0
        self.tp_group: dist_group_type | None = None
        self.tp_size = 1
        self.tp_group_initialized = False
        self.sequence_parallel = False
        self.activation_dtype: torch.dtype | None = None
        self._fwd_measured = False
        self._recompute_in_fp8 = False

    def _fp8_device(self) -> torch.device:
        first = next(self.parameters(), None)
        return first.device if first is not None else torch.device("hpu")

    def set_meta_tensor(self, tensor_type: MetaTensorType) -> None:
        """Create the scaling group of ``tensor_type`` (scales 1, empty history) in ``fp8_meta``."""
        columns = self.fp8_meta["num_gemms"] * (1 if tensor_type == MetaTensorType.BACKWARD else 2)
        history = self.fp8_meta["recipe"].amax_history_len
        device = self._fp8_device()
        meta = FP8TensorMeta()
        meta.scale = torch.ones(columns, dtype=torch.float32, device=device)
        meta.scale_inv = torch.ones(columns, dtype=torch.float32, device=device)
        meta.amax_history = torch.zeros(history, columns, dtype=torch.float32, device=device)
        meta.amax_history_index = torch.zeros(1, dtype=torch.int32, device=device)
        self.fp8_meta[FP8GlobalStateManager.get_meta_tensor_key(tensor_type)] = meta

    def init_fp8_meta_tensors(self, force_hybrid_init: bool = False) -> None:
        """Create the forward and backward scaling groups, and the hybrid one for HYBRID (or when forced)."""
        self.set_meta_tensor(MetaTensorType.FORWARD)
        self.set_meta_tensor(MetaTensorType.BACKWARD)
        if force_hybrid_init or self.fp8_meta["recipe"].fp8_format == _Format.HYBRID:
            self.set_meta_tensor(MetaTensorType.HYBRID)
        self.fp8_meta_tensors_initialized = True

    def fp8_init(self, num_gemms: int = 1) -> None:
        """Read ``fp8_autocast``'s state; a recipe other than the layer's starts its scaling state afresh."""
        self.fp8 = FP8GlobalStateManager.is_fp8_enabled()
        if not self.fp8:
            return
        recipe = FP8GlobalStateManager.get_fp8_recipe() or get_default_fp8_recipe()
        current = self.fp8_meta.get("recipe")
        if not self.fp8_meta_tensors_initialized or (current is not recipe and current != recipe):
            self._reset_fp8_meta(recipe, num_gemms)
        self.fp8_meta["fp8_group"] = FP8GlobalStateManager.get_fp8_group()

    def _reset_fp8_meta(self, recipe: _DelayedScaling, num_gemms: int) -> None:
        phase = self.fp8_meta.get("in_activation_recompute_phase", False)
        self.fp8_meta.clear()
        self.fp8_meta.update(
            in_activation_recompute_phase=phase,
            recipe=recipe,
            num_gemms=num_gemms,
            fp8_max_fwd=recipe.fp8_format.value.max_fwd,
            fp8_max_bwd=recipe.fp8_format.value.max_bwd,
            is_scale_update_required=True,
            bwd_measured=False,
        )
        self.init_fp8_meta_tensors()
        self._fwd_measured = False

    def get_amax_measure_state(self) -> dict[str, bool]:
        """Whether this run measures amaxes: ``fp8_autocast(force_measurement=...)``, else the recipe's interval."""
        manual = FP8GlobalStateManager.get_manual_measurement_mode()
        if manual is not None:
            enabled = bool(manual)
        else:
            recipe = self.fp8_meta["recipe"]
            interval, history = recipe.interval, recipe.amax_history_len
            # Amaxes are measured in the last ``amax_history_len`` runs of each interval.
            enabled = interval == 1 or self.run_cnt % interval in range(interval - history, interval)
        return {"fwd_enabled": enabled, "bwd_enabled": enabled}

    def is_scale_update_required(self) -> bool:
        """Whether this run recomputes the scales: every run with ``interval == 1``, else every ``interval`` runs."""
        interval = self.fp8_meta["recipe"].interval
        return bool(interval == 1 or self.run_cnt % interval == 0)

    def set_activation_dtype(self, inp: torch.Tensor) -> None:
        """The dtype the layer returns: ``torch.autocast``'s for the input's device when it is on, else the input's."""
        if torch.is_autocast_enabled(inp.device.type):
            self.activation_dtype = torch.get_autocast_dtype(inp.device.type)
        else:
            self.activation_dtype = inp.dtype

    def set_tensor_parallel_group(self, tp_group: dist_group_type | None) -> None:
        """The tensor-parallel group of the layer."""
        self.tp_group = tp_group
        self.tp_group_initialized = True

    def set_fp8_weights(self) -> None:
        """Create the fp8 copies of the weights kept across micro-batches: none, the emulator casts them each run."""

    def get_fp8_weights_scratchpad(self, is_first_microbatch: bool | None) -> list[torch.Tensor | None]:
        """The fp8 copies of the weights kept across micro-batches: none (see :meth:`set_fp8_weights`)."""
        return [None, None]

    def _recompute_phase(self) -> bool:
        # The SDK's rule: under checkpointing, gradients off is the first run, on after off is the recompute.
        if not is_fp8_activation_recompute_enabled():
            self.fp8_meta["in_activation_recompute_phase"] = False
        elif not torch.is_grad_enabled():
            self.fp8_meta["in_activation_recompute_phase"] = False
        elif self.fp8_meta.get("in_activation_recompute_phase") is False:
            self.fp8_meta["in_activation_recompute_phase"] = True
        return bool(self.fp8_meta.get("in_activation_recompute_phase", False))

    @contextmanager
    def prepare_forward(
        self, inp: torch.Tensor | None, is_first_microbatch: bool | None, num_gemms: int = 1
    ) -> Iterator[tuple[Any, bool]]:
        """Around a forward: the scale update, the measuring decision and the checkpointing phases.

        Sets ``self.fp8`` and, in ``fp8_meta``, ``"update_amax_fwd"`` (what this run records) and
        ``"update_amax_bwd"`` (whether its backward measures).

        Yields:
            The contiguous input (``None`` for a layer without one, as ``FusedAttention``: the SDK's base then leaves
            the activation dtype alone, ``module/base.py:474-475`` at 1.18.0) and whether the scales were recomputed
            this run.
        """
        recompute = self.training and self._recompute_phase()
        if recompute:
            # The recompute of a checkpoint runs in the backward pass, outside fp8_autocast: as the first run did.
            self.fp8 = self._recompute_in_fp8
            if self.fp8:
                FP8GlobalStateManager.get_old_fp8_meta_tensors_for_recompute(self.fp8_meta)
                self.fp8_meta["update_amax_fwd"] = {"fwd_enabled": False}
                self.fp8_meta["update_amax_bwd"] = self._fwd_measured
        else:
            if inp is not None:
                self.set_activation_dtype(inp)
            self.fp8_init(num_gemms=num_gemms)
            if self.fp8:
                self.fp8_meta["update_amax_fwd"] = {"fwd_enabled": False}
                self.fp8_meta["update_amax_bwd"] = False
            if self.fp8 and self.training:
                self.run_cnt += 1
                self.fp8_meta["is_scale_update_required"] = self.is_scale_update_required()
                if self._fwd_measured:
                    _update(self.fp8_meta, True, self.fp8_meta["is_scale_update_required"])
                measure = self.get_amax_measure_state()["fwd_enabled"]
                self._fwd_measured = measure
                checkpointed = is_fp8_activation_recompute_enabled()
                # Under checkpointing the first run has gradients off and still measures (the SDK's rule).
                self.fp8_meta["update_amax_fwd"] = {
                    "fwd_enabled": measure and (torch.is_grad_enabled() or checkpointed)
                }
                self.fp8_meta["update_amax_bwd"] = measure and torch.is_grad_enabled()
                if checkpointed:
                    FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute(self.fp8_meta)
                    self._recompute_in_fp8 = True
        self.fp8_meta["run_cnt"] = self.run_cnt
        self.fp8_meta["name"] = self.name
        try:
            yield (
                (inp.contiguous() if inp is not None else None),
                bool(self.fp8_meta.get("is_scale_update_required", False)),
            )
        finally:
            if recompute and self.fp8:
                FP8GlobalStateManager.restore_fp8_meta_tensors(self.fp8_meta)

    @staticmethod
    def grad_output_preprocess(
        ctx: Any,
        grad_output: torch.Tensor,
        row_parallel_mode: bool,
        amax_measure_state: Any,
        grad_tensor: Any = FP8BwdTensors.GRAD_OUTPUT1,
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        """The output gradient as a matrix, and cast to fp8 with the backward scale (measured when asked).

        Returns:
            ``(grad_output_mat, grad_output_fp8_values, None)``: the gradient as a 2-D matrix, its fp8 values (as
            the float32 numbers they stand for) and no bias gradient (the layer adds its bias outside).
        """
        fp8_meta = ctx.fp8_meta
        recipe = fp8_meta["recipe"]
        meta = fp8_meta["scaling_bwd"]
        if amax_measure_state:
            _prepare_backward(fp8_meta)
            _record(meta, grad_tensor, grad_output)
        g8 = _quantize(
            grad_output,
            meta.scale[grad_tensor],
            recipe.fp8_format.value.max_bwd,
            get_fp8_te_dtype(recipe, fprop_tensor=False),
            stochastic=get_fp8_te_sr(recipe, fprop_tensor=False),
        )
        grad = _dequantize(g8, meta.scale_inv[grad_tensor])
        return grad_output.reshape(-1, grad_output.shape[-1]), grad, None

    def save_fp8_meta(self) -> dict[str, Any] | None:
        """The fp8 scaling state as plain values and host tensors (``None`` before the first fp8 run)."""
        if not self.fp8_meta_tensors_initialized:
            return None
        saved: dict[str, Any] = {
            "run_cnt": self.run_cnt,
            "fwd_measured": self._fwd_measured,
            "bwd_measured": bool(self.fp8_meta.get("bwd_measured", False)),
        }
        for suffix in ("fwd", "bwd", "hybrid"):
            meta = self.fp8_meta.get(f"scaling_{suffix}")
            if meta is not None:
                saved[suffix] = {
                    "scale": meta.scale.detach().cpu(),
                    "amax_history": meta.amax_history.detach().cpu(),
                    "amax_history_index": _row(meta),
                }
        # Plain values only, so that checkpoints load with torch.load(weights_only=True).
        recipe = self.fp8_meta["recipe"]
        saved["recipe"] = {
            "margin": recipe.margin,
            "interval": recipe.interval,
            "fp8_format": recipe.fp8_format.name,
            "amax_history_len": recipe.amax_history_len,
            "amax_compute_algo": recipe.amax_compute_algo if isinstance(recipe.amax_compute_algo, str) else "max",
            "reduce_amax": recipe.reduce_amax,
        }
        saved["num_gemms"] = self.fp8_meta["num_gemms"]
        return saved

    def load_fp8_meta(self, fp8_meta: Any) -> None:
        """Restore what :meth:`save_fp8_meta` returned."""
        if not fp8_meta:
            return
        fields = dict(fp8_meta["recipe"])
        recipe = _DelayedScaling(**{**fields, "fp8_format": _Format[fields["fp8_format"]]})
        self._reset_fp8_meta(recipe, int(fp8_meta.get("num_gemms", 1)))
        device = self._fp8_device()
        for suffix in ("fwd", "bwd", "hybrid"):
            meta = self.fp8_meta.get(f"scaling_{suffix}")
            if meta is not None and suffix in fp8_meta:
                meta.scale = fp8_meta[suffix]["scale"].to(device)
                meta.scale_inv = torch.reciprocal(meta.scale)
                meta.amax_history = fp8_meta[suffix]["amax_history"].to(device)
                meta.amax_history_index.fill_(int(fp8_meta[suffix]["amax_history_index"]))
        self.fp8_meta["bwd_measured"] = bool(fp8_meta.get("bwd_measured", False))
        self.run_cnt = int(fp8_meta.get("run_cnt", 0))
        self._fwd_measured = bool(fp8_meta.get("fwd_measured", False))

    def get_extra_state(self) -> dict[str, Any]:
        """The fp8 scaling state (scales, amax histories), saved in ``state_dict``."""
        return self.save_fp8_meta() or {}

    def set_extra_state(self, state: Any) -> None:
        """Restore what :meth:`get_extra_state` saved."""
        self.load_fp8_meta(state)

    @abstractmethod
    def forward(self) -> Any:
        """The layer's computation."""
