"""What the Trainer and Fabric FSDP strategies and precision plugins for HPUs share: their rules, written once.

Lightning-free (the classes of both trees, and their ``pytorch_lightning`` twins, call it), so that each rule has one
home:

- the precisions FSDP runs on HPUs (``"bf16-mixed"``, ``"bf16-true"``, ``"16-mixed"``, ``"32-true"``) and the
  :class:`MixedPrecision` each gives (Lightning's);
- which precision plugins the strategies take, and the error for the others;
- eager mode only: Intel Gaudi runs FSDP in eager mode (``PT_HPU_LAZY_MODE=0``, the default since SDK 1.21).
  Sources: Intel Gaudi documentation, "Using Fully Sharded Data Parallel (FSDP) with Intel Gaudi"
  (docs.habana.ai/en/latest/PyTorch/PyTorch_FSDP/Pytorch_FSDP.html): "Intel Gaudi FSDP integration can be executed
  using Eager mode with torch.compile", and its example sets ``PT_HPU_LAZY_MODE=0``; the archived lightning-habana
  ran its FSDP tests with ``PT_HPU_LAZY_MODE=0`` only (``.azure/hpu-tests.yml``);
- the device torch FSDP is given: an HPU *with* an index (``hpu:0``), because FSDP takes ``device_id`` as an index.
  Each Gaudi process drives one card and sees it as ``hpu:0`` (the runtime picks the card from ``HLS_MODULE_ID``), so
  the index is the SDK's ``current_device()``. Lightning passes ``root_device.index`` to FSDP, which makes it a device
  with ``torch.device(index)``: since torch 2.5 (pytorch/pytorch#129119) that is the current accelerator's device,
  ``hpu:0`` on Gaudi and on the emulator, whose device is c10's ``HPU`` too (``at::getAccelerator`` knows ``HPU``).
  Not yet checked on Gaudi hardware.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from lightning_accel.core.errors import ConfigurationError

from . import sdk
from ._precision_settings import loss_scaler

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecision

__all__ = [
    "ACCEPTED_PRECISIONS",
    "build_device_mesh",
    "HPUFSDPPrecisionRules",
    "STATE_DICT_TYPES",
    "check_device",
    "check_precision",
    "check_state_dict_type",
    "check_unsupported_fp8_arguments",
    "fsdp_device",
    "full_state_dict_context",
    "hpu_precision_plugin",
    "mixed_precision_config",
    "refuse_lazy_mode",
    "refuse_plugin",
]

ACCEPTED_PRECISIONS = ("bf16-mixed", "bf16-true", "16-mixed", "32-true")
"""The precisions FSDP runs on HPUs."""

_ACCEPTED_TEXT = "'bf16-mixed', 'bf16-true', '16-mixed' (Gaudi2 and later) or '32-true'"


def check_precision(precision: Any, owner: str) -> str:
    """``precision`` if FSDP runs it on HPUs.

    Raises:
        ConfigurationError: For any other precision, with the accepted ones.
    """
    if precision in ACCEPTED_PRECISIONS:
        return str(precision)
    hint = (
        " The HPU plugins keep float16 for mixed precision only: '16-mixed' computes in float16 with float32 "
        "weights, and 'bf16-true' gives 16-bit weights (bfloat16)."
        if precision == "16-true"
        else ""
    )
    raise ConfigurationError(
        f"{owner}(precision={precision!r}) is not supported. Accepted: {_ACCEPTED_TEXT}.{hint} Use "
        "Trainer/Fabric(precision='bf16-mixed') for Lightning's usual mixed precision."
    )


def check_device(device: str) -> None:
    """Refuse a precision plugin device other than ``"hpu"``.

    Raises:
        ConfigurationError: For any other device.
    """
    if device != "hpu":
        raise ConfigurationError(
            f"HPUFSDPPrecision(device={device!r}) is not supported. Accepted: 'hpu'. For FSDP on other devices use "
            "Lightning's strategy='fsdp' and its precision plugins."
        )


def check_unsupported_fp8_arguments(recipe: Any, replace_layers: bool) -> None:
    """Refuse the fp8 arguments the archived lightning-habana accepted and then ignored.

    Raises:
        ConfigurationError: When ``recipe`` or ``replace_layers`` is given.
    """
    if recipe is None and not replace_layers:
        return
    raise ConfigurationError(
        f"HPUFSDPPrecision(recipe={recipe!r}, replace_layers={replace_layers!r}) is not supported: fp8 training does "
        "not run under FSDP on HPUs (lightning-habana accepted these arguments and ignored them). Accepted: "
        "recipe=None, replace_layers=False. For fp8, use HPUPrecisionPlugin(precision='fp8') with a single-HPU or "
        "data-parallel strategy."
    )


def mixed_precision_config(precision: str) -> MixedPrecision | None:
    """The :class:`torch.distributed.fsdp.MixedPrecision` of ``precision``; ``None`` for ``"32-true"``.

    Lightning's choice for each precision: FSDP keeps the sharded parameters in their own dtype (float32 for the
    mixed precisions, bfloat16 for ``"bf16-true"``, whose module is converted before sharding) and gathers them for
    the forward and backward passes in the 16-bit dtype, reduces gradients in it (half the reduce-scatter traffic)
    and casts buffers to it. Pass ``mixed_precision=`` to the strategy for another choice, for example float32
    buffers to keep BatchNorm's running statistics unrounded.
    """
    if precision == "32-true":
        return None
    from torch.distributed.fsdp import MixedPrecision

    dtype = torch.float16 if precision == "16-mixed" else torch.bfloat16
    return MixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype)


STATE_DICT_TYPES = ("full", "sharded")
_Plugin = TypeVar("_Plugin")


def check_state_dict_type(state_dict_type: Any) -> None:
    """Refuse a ``state_dict_type`` other than ``"full"`` and ``"sharded"``, naming both."""
    if state_dict_type not in STATE_DICT_TYPES:
        raise ConfigurationError(
            f"HPUFSDPStrategy(state_dict_type={state_dict_type!r}) is not supported. Accepted: 'full' (one file, "
            "gathered on rank 0) or 'sharded' (a folder with one shard per rank)."
        )


def hpu_precision_plugin(
    plugin: object, hpu_class: type[_Plugin], fsdp_class: type, base_class: type, tree_hint: str
) -> _Plugin:
    """The HPU FSDP precision plugin for ``plugin``, given the classes of one Lightning tree.

    What the connector builds for ``precision=`` (``fsdp_class`` for an FSDP strategy, or ``base_class`` for the
    default float32) becomes ``hpu_class`` with the same precision; an ``hpu_class`` is kept; anything else is refused.
    """
    if isinstance(plugin, hpu_class):
        return plugin
    if type(plugin) is fsdp_class:
        # Lightning's plugin for "16-mixed" carries a ShardedGradScaler (the user's, or one Lightning built): the
        # HPU plugin's scaler takes its settings.
        scaler = getattr(plugin, "scaler", None)
        return hpu_class(plugin.precision, scaler=scaler)  # type: ignore[attr-defined,call-arg]
    if type(plugin) is base_class:
        return hpu_class("32-true")  # type: ignore[call-arg]
    raise refuse_plugin("HPUFSDPStrategy", plugin, tree_hint)


def refuse_plugin(strategy: str, plugin: object, tree_hint: str) -> ConfigurationError:
    """The error for a precision plugin the FSDP strategy cannot use.

    Args:
        strategy: The strategy's class name.
        plugin: The plugin given.
        tree_hint: How a user of this tree selects the precision (e.g. ``"Trainer(precision=...)"``).
    """
    return ConfigurationError(
        f"{strategy} cannot use the precision plugin {type(plugin).__name__} (precision="
        f"{getattr(plugin, 'precision', None)!r}): torch FSDP casts parameters and gradients itself, so the strategy "
        f"needs HPUFSDPPrecision. Accepted: {tree_hint} with {_ACCEPTED_TEXT}, or plugins=[HPUFSDPPrecision("
        "'bf16-mixed')] (HPUFSDPPrecision from lightning_accel.habana, or lightning_accel.habana.fabric for Fabric)."
    )


def refuse_lazy_mode(strategy: str) -> None:
    """Refuse to run FSDP when the SDK loaded in lazy mode (see the module docstring for the source).

    Raises:
        ConfigurationError: In lazy mode (``PT_HPU_LAZY_MODE=1`` when the SDK loaded).
    """
    if not sdk.core_module().is_lazy():
        return
    raise ConfigurationError(
        f"{strategy} needs the Habana SDK in eager mode, but it loaded in lazy mode (PT_HPU_LAZY_MODE=1). Intel Gaudi "
        "runs FSDP in eager mode only. Accepted: PT_HPU_LAZY_MODE=0 or unset (eager, the default since SDK 1.21); "
        "set it before the process starts (the SDK reads it once, when it loads), or use strategy='hpu_parallel' in "
        "lazy mode."
    )


def build_device_mesh(fsdp_kwargs: dict[str, Any]) -> None:
    """Turn a ``device_mesh=(replicas, shards)`` tuple in ``fsdp_kwargs`` into a device mesh of HPUs, in place.

    Lightning builds the mesh of a tuple on ``"cuda"``; the HPU strategies build it on the HPUs, once the process
    group exists.
    """
    mesh = fsdp_kwargs.get("device_mesh")
    if isinstance(mesh, tuple):
        from torch.distributed.device_mesh import init_device_mesh

        fsdp_kwargs["device_mesh"] = init_device_mesh(sdk.DEVICE_TYPE, mesh)


def full_state_dict_context(module: torch.nn.Module) -> AbstractContextManager[Any]:
    """FSDP's full state dict, gathered on rank 0 unit by unit and offloaded to the host as each unit is gathered.

    The settings are Lightning's (``lightning/fabric/strategies/fsdp.py``, ``_get_full_state_dict_context``:
    ``offload_to_cpu=True, rank0_only=True`` for the parameters and the optimizer state), so a rank's device holds its
    shard plus one gathered unit at a time (its flat parameter, or its optimizer states), never the whole model. torch
    FSDP offloads a unit by swapping its flat parameter's data for a host tensor
    (``FlatParamHandle.to_cpu``: ``flat_param.data = flat_param.to("cpu")``), which Gaudi's built-in HPU device type
    allows. One exception, torch's: it cannot offload the parameters of ``NO_SHARD`` units ("offload_to_cpu=True and
    NO_SHARD is not supported yet"; FSDP also turns a world size of 1 into ``NO_SHARD``), whose full parameters every
    rank holds anyway, so the parameters of a model with such units are gathered on the device (where Lightning's own
    strategy fails); its optimizer state still goes to the host.
    """
    from torch.distributed.fsdp import FullStateDictConfig, ShardingStrategy, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.api import FullOptimStateDictConfig

    offload = all(unit.sharding_strategy != ShardingStrategy.NO_SHARD for unit in FSDP.fsdp_modules(module))
    return FSDP.state_dict_type(
        module=module,
        state_dict_type=StateDictType.FULL_STATE_DICT,
        state_dict_config=FullStateDictConfig(offload_to_cpu=offload, rank0_only=True),
        optim_state_dict_config=FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True),
    )


def fsdp_device(hpu: torch.device) -> torch.device:
    """The device torch FSDP works on: this process's HPU with an index (``hpu:0``, see the module docstring)."""
    if hpu.index is not None:
        return hpu
    return torch.device(hpu.type, int(sdk.hpu_module().current_device()))


class HPUFSDPPrecisionRules:
    """The body of the Trainer's and Fabric's ``HPUFSDPPrecision``: put before the tree's ``FSDPPrecision``.

    Checks the arguments, gives FSDP its ``MixedPrecision``, runs the mixed precisions' forwards in the SDK's autocast
    and scales the loss of ``"16-mixed"`` with an :class:`~lightning_accel.habana.HPUShardedGradScaler`; the tree's
    ``FSDPPrecision`` does the rest (``"bf16-true"``: the module converted to bfloat16 before sharding, and made in
    bfloat16 under ``init_module``).
    """

    precision: Any

    def __init__(
        self,
        precision: str,
        device: str = "hpu",
        recipe: Any | None = None,
        replace_layers: bool = False,
        scaler: Any = None,
    ) -> None:
        check_device(device)
        check_unsupported_fp8_arguments(recipe, replace_layers)
        precision = check_precision(precision, "HPUFSDPPrecision")
        scaler = loss_scaler(precision, scaler, sharded=True)
        # Lightning's FSDPPrecision reads self.precision before it sets it, and keeps a given scaler only as None:
        # handing it one spares building torch's CUDA ShardedGradScaler, and the HPU one is set after.
        self.precision = precision
        super().__init__(precision, scaler=scaler)  # type: ignore[call-arg]
        self.scaler = scaler
        self.device = device

    @property
    def mixed_precision_config(self) -> MixedPrecision | None:
        """The ``MixedPrecision`` FSDP wraps the model with (``None`` for ``"32-true"``)."""
        return mixed_precision_config(self.precision)

    def forward_context(self) -> AbstractContextManager[Any]:
        """The SDK's autocast for the mixed precisions; the weights' dtype as the default dtype for the others."""
        if self.precision == "bf16-mixed":
            return sdk.autocast(torch.bfloat16)
        if self.precision == "16-mixed":
            return sdk.autocast(torch.float16)
        context: AbstractContextManager[Any] = super().forward_context()  # type: ignore[misc]
        return context
