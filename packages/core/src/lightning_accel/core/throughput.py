"""Model-FLOPs utilisation (MFU) on vendor accelerators: Lightning's throughput tools learn each vendor's peak FLOPs.

Lightning's ``ThroughputMonitor`` callback (``lightning.pytorch.callbacks.throughput_monitor``) and its Fabric
counterpart (``lightning.fabric.utilities.throughput``) report ``device/mfu`` as the achieved FLOPs per second divided
by ``get_available_flops(device, dtype)``, which knows CUDA GPUs and TPUs only; and the compute dtype comes from
``_plugin_to_compute_dtype(plugin)``, which maps every precision plugin that is not one of Lightning's own to
``float32``. When the core registers into a tree it wraps, in that tree's two throughput modules:

- ``get_available_flops``: for a vendor accelerator whose :class:`~lightning_accel.core.plugin.AcceleratorSpec`
  names a ``peak_flops`` function, the answer is that function's (``None`` with Lightning's own warning when the
  vendor publishes no number for the dtype); every other device gets Lightning's answer;
- ``_plugin_to_compute_dtype``: a plugin Lightning maps to ``float32`` whose ``precision`` says otherwise
  (``"bf16-mixed"``, ``"16-mixed"``, ...) computes in that dtype (:func:`compute_dtype`);
- ``ThroughputMonitor.setup`` (Trainer) and ``ThroughputMonitor.__init__`` (Fabric): while they ask for the peak,
  the accelerator of the Trainer or Fabric is known, so an accelerator whose strategy's root device is the host (the
  IPU's: poptorch takes host tensors) still gets its own peak.

The vendor table is chosen by accelerator name, so the wraps never ask whether a device is emulated. The module
imports no Lightning tree at import time (the tree is imported already when :func:`install_throughput` runs).

Example:
    >>> import torch
    >>> compute_dtype("bf16-mixed") == torch.bfloat16
    True
"""

from __future__ import annotations

import contextvars
import importlib
from typing import TYPE_CHECKING, Any, Callable

import torch

from lightning_accel.core.plugin import import_target
from lightning_accel.core.registration import vendor_accelerators

if TYPE_CHECKING:
    from lightning_accel.core.compat import Tree

__all__ = ["PRECISION_DTYPES", "compute_dtype", "install_throughput", "peak_flops"]

_MARK = "__lightning_accel_original__"

# The dtype a precision setting computes in (Lightning's names, and "fp8" of the HPU plugin).
PRECISION_DTYPES: dict[str, torch.dtype] = {
    "64-true": torch.float64,
    "64": torch.float64,
    "32-true": torch.float32,
    "32": torch.float32,
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
    "bf16": torch.bfloat16,
    "16-mixed": torch.float16,
    "16-true": torch.float16,
    "16": torch.float16,
}
if hasattr(torch, "float8_e4m3fn"):  # torch 2.1 and later
    PRECISION_DTYPES["fp8"] = torch.float8_e4m3fn

# The accelerator (registered name) of the Trainer or Fabric whose ThroughputMonitor is asking for the peak.
_asking_accelerator: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "lightning_accel_asking_accelerator", default=None
)


def compute_dtype(precision: object) -> torch.dtype | None:
    """The dtype a ``precision`` setting (``"bf16-mixed"``, ``16``, ...) computes in, or ``None`` if unknown."""
    return PRECISION_DTYPES.get(str(precision))


def _peak_flops_functions(tree: Tree) -> dict[str, str]:
    return {vendor.spec.name: vendor.spec.peak_flops for vendor in vendor_accelerators(tree) if vendor.spec.peak_flops}


def peak_flops(tree: Tree, accelerator: str, device: torch.device, dtype: torch.dtype | str) -> int | None:
    """The vendor's peak FLOPs per second of ``accelerator`` (registered into ``tree``) for ``dtype``.

    Raises:
        KeyError: When the accelerator's plugin names no ``peak_flops`` function.
    """
    function: Callable[[torch.device, Any], int | None] = import_target(_peak_flops_functions(tree)[accelerator])
    return function(device, dtype)


def _accelerator_name(tree: Tree, accelerator: object) -> str | None:
    for vendor in vendor_accelerators(tree):
        if vendor.owns(accelerator):
            return vendor.spec.name
    return None


def _original(owner: Any, name: str) -> Callable[..., Any]:
    current = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    original: Callable[..., Any] = getattr(current, _MARK, current)
    return original


def _mark(wrapper: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    setattr(wrapper, _MARK, original)
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(wrapper, attribute, getattr(original, attribute))
    return wrapper


def _wrap_get_available_flops(tree: Tree, module: Any, rank_zero_warn: Callable[..., Any]) -> None:
    original = _original(module, "get_available_flops")

    def get_available_flops(device: torch.device, dtype: torch.dtype | str) -> int | None:
        functions = _peak_flops_functions(tree)
        name = _asking_accelerator.get() or torch.device(device).type
        if name not in functions:
            return original(device, dtype)
        flops = peak_flops(tree, name, device, dtype)
        if flops is None:
            # Lightning's own reaction to a device it has no number for.
            rank_zero_warn(f"FLOPs not found for accelerator {name!r} with {dtype}: no published peak for this dtype")
        return flops

    module.get_available_flops = _mark(get_available_flops, original)


def _wrap_compute_dtype(module: Any) -> None:
    original = _original(module, "_plugin_to_compute_dtype")

    def _plugin_to_compute_dtype(plugin: Any) -> torch.dtype:
        dtype: torch.dtype = original(plugin)
        if dtype is torch.float32:
            return compute_dtype(getattr(plugin, "precision", None)) or dtype
        return dtype

    module._plugin_to_compute_dtype = _mark(_plugin_to_compute_dtype, original)


def _wrap_asking(tree: Tree, cls: type, method: str, accelerator_of: Callable[[Any], object]) -> None:
    original = _original(cls, method)

    def asking(self: Any, owner: Any, *args: Any, **kwargs: Any) -> Any:
        token = _asking_accelerator.set(_accelerator_name(tree, accelerator_of(owner)))
        try:
            return original(self, owner, *args, **kwargs)
        finally:
            _asking_accelerator.reset(token)

    setattr(cls, method, _mark(asking, original))


def install_throughput(tree: Tree) -> None:
    """Wrap the throughput tools of ``tree`` (idempotent: re-installing wraps the originals again)."""
    if tree.kind == "fabric":
        module = importlib.import_module(f"{tree.module}.utilities.throughput")
        rank_zero = importlib.import_module(f"{tree.module}.utilities.rank_zero")
        _wrap_asking(tree, module.ThroughputMonitor, "__init__", lambda fabric: fabric.accelerator)
    else:
        module = importlib.import_module(f"{tree.module}.callbacks.throughput_monitor")
        rank_zero = importlib.import_module(f"{tree.module}.utilities.rank_zero")
        _wrap_asking(tree, module.ThroughputMonitor, "setup", lambda trainer: trainer.accelerator)
    _wrap_get_available_flops(tree, module, rank_zero.rank_zero_warn)
    _wrap_compute_dtype(module)
