"""Emulation of ``habana_frameworks.torch.hpu``: device queries, RNG, memory statistics and HPU graphs.

As in the SDK, ``hpu.hpu`` refers to this module itself, so ``torch_hpu.hpu.memory_stats()`` works too. The names
and their parameters are the SDK's (gaudi-pytorch-bridge bcc5172, the 1.24 period: ``hpu/__init__.py``,
``memory.py``, ``random.py``, ``streams.py``, ``events.py``, ``sdp_kernel_flag.py``; checked by
``packages/habana-emulator/tests/test_sdk_api_table.py``); the names that only Gaudi can serve (graph-compiler
switches, ``hl-smi`` readings) refuse with the reason when used (``.._not_emulated``).

The HPU graph APIs (every public name of ``graphs``: ``HPUGraph``, ``graph``, ``make_graphed_callables``,
``ModuleCacher``, ``wrap_in_hpu_graph`` ...) are exported in both modes, as the SDK does from the 1.24 period on
(``from .graphs import *``, ``hpu/__init__.py:46``; 1.19.0 exported them in lazy mode only). Graphs themselves are
lazy-mode objects: in eager mode, the default, creating an ``HPUGraph`` or a ``graph`` capture raises
``RuntimeError`` (``graphs.py:49-51``, ``:188-189``), so ``make_graphed_callables`` fails when it creates its graphs
and ``wrap_in_hpu_graph`` at its first call, while ``ModuleCacher`` runs the plain forward. The mode is decided when
the SDK loads (see ``core``).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Literal

import torch

from .. import _not_emulated
from ..utils.internal import is_lazy
from ..version import __version__ as __version__
from ..version import version
from . import graphs, random
from ._devices import (
    HABANA_VISIBLE_MODULES_VAR,
    HLS_MODULE_ID_VAR,
    _index_of,
    _lazy_init,  # noqa: F401  (torch calls torch.hpu._lazy_init() before it makes the first tensor)
    current_device,
    device_count,
    get_device_name,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from .events import Event
from .memory import (
    formatted_memory_stats,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)

# The SDK's `from .metrics import *`.
from .metrics import MetricNotFoundError, metric_global, metric_localcontext, metrics_dump
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .sdp_kernel_flag import enable_recompute_sdp, is_recompute_FSDPA_enabled, recompute_sdp_enabled, sdp_kernel
from .streams import Stream, current_stream, default_stream, stream

hpu = sys.modules[__name__]

_SDK = "habana_frameworks.torch.hpu"
_SYNC_DEBUG_VAR = "PT_ENABLE_HABANA_STREAMASYNC"
_deterministic = False


class device:
    """Context manager that selects the HPU inside the block (the SDK's ``hpu.device``).

    A process drives one HPU (``hpu:0``, the module ``HLS_MODULE_ID`` names): as on the SDK, an index other than 0
    must be that module.

    Example:
        >>> import habana_frameworks.torch.hpu as hpu
        >>> with hpu.device(0):
        ...     pass
    """

    def __init__(self, device: Any) -> None:
        # An index-less "hpu" is the current device, 0 (the SDK's _get_device_index asks current_device()).
        index = _index_of(device) if _has_index(device) else 0
        module = int(os.environ.get(HLS_MODULE_ID_VAR) or -1)
        if index != 0 and index != module:
            # The SDK's own assertion and text (hpu/__init__.py:367-372).
            raise AssertionError(f"Requested device_id={index} is different from env_device_id={module}")
        self.idx = module
        self.prev_idx = -1

    def __enter__(self) -> None:
        return None

    def __exit__(self, type: Any, value: Any, traceback: Any) -> Literal[False]:
        return False


def _has_index(device: Any) -> bool:
    if device is None:
        return False
    if isinstance(device, (str, torch.device)):
        try:
            return torch.device(device).index is not None
        except (RuntimeError, TypeError):
            return True  # _index_of refuses it with its message
    return True


class device_of(device):
    """Context manager that selects the HPU of ``obj`` (a tensor) inside the block (the SDK's ``hpu.device_of``)."""

    def __init__(self, obj: Any) -> None:
        super().__init__(obj.get_device() if obj.device.type == "hpu" else None)


def is_autocast_hpu_enabled() -> bool:
    """Whether autocast is on for ``"hpu"`` here: torch's autocast state of the HPU (``torch.autocast("hpu")``)."""
    return bool(torch.is_autocast_enabled("hpu"))


def set_autocast_hpu_enabled(enabled: bool) -> None:
    """Switch autocast for ``"hpu"`` on or off (the state ``torch.autocast("hpu")`` sets and restores)."""
    torch.set_autocast_enabled("hpu", bool(enabled))


def get_autocast_hpu_dtype() -> torch.dtype:
    """The dtype autocast casts ``"hpu"`` operations to (``torch.bfloat16`` unless set)."""
    return torch.get_autocast_dtype("hpu")


def set_autocast_hpu_dtype(dtype: torch.dtype) -> None:
    """Set the dtype autocast casts ``"hpu"`` operations to.

    Raises:
        TypeError: When ``dtype`` is not a ``torch.dtype``.
    """
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype such as torch.bfloat16, got {dtype!r}.")
    torch.set_autocast_dtype("hpu", dtype)


def is_bf16_supported() -> bool:
    """Whether bfloat16 is supported: on every Gaudi, as on the SDK (``is_available()``)."""
    return is_available()


def get_arch_list() -> list[str]:
    """The device architecture names (the SDK returns the current device's name)."""
    return [get_device_name(current_device())]


def get_gencode_flags() -> str:
    """The gencode flags the library was compiled with: none, as on the SDK."""
    return ""


def set_sync_debug_mode(debug_mode: Any) -> None:
    """Set ``PT_ENABLE_HABANA_STREAMASYNC`` to ``str(debug_mode)``, as the SDK does (the emulator runs in order)."""
    os.environ[_SYNC_DEBUG_VAR] = str(debug_mode)


def get_sync_debug_mode() -> int:
    """``int(PT_ENABLE_HABANA_STREAMASYNC)``, as the SDK reads it (a ``KeyError`` when it was never set)."""
    return int(os.environ[_SYNC_DEBUG_VAR])


def setDeterministic(val: bool) -> None:
    """Ask for deterministic algorithms: ``torch.use_deterministic_algorithms(val)``, as the SDK does.

    The SDK (bcc5172 ``hpu/__init__.py``) also sets its kernels' switch; the emulator's kernels are torch's. Deprecated
    in the SDK, which warns.
    """
    global _deterministic
    warnings.warn(
        "torch.hpu.setDeterministic is deprecated and will be removed in next release. Please use "
        "torch.use_deterministic_algorithms instead.",
        stacklevel=2,
    )
    torch.use_deterministic_algorithms(val)
    _deterministic = bool(val)


def getDeterministic() -> bool:
    """Whether deterministic HPU kernels were asked for with :func:`setDeterministic` (deprecated in the SDK)."""
    warnings.warn(
        "torch.hpu.getDeterministic is deprecated and will be removed in next release. Please use "
        "torch.are_deterministic_algorithms_enabled instead.",
        stacklevel=2,
    )
    return _deterministic


# The SDK's `from .graphs import *`: every public name of graphs, the emulated ones and the stand-ins of the rest.
_GRAPH_API: dict[str, Any] = {
    name: getattr(graphs, name) for name in (*graphs.__all__, *_not_emulated.NAMES[graphs._SDK])
}


def _export_graph_api(lazy: bool) -> None:
    """Emulator only: export the HPU graph APIs from this module, whatever the mode (``lazy``), as the SDK does.

    The names do not depend on the mode (bcc5172 ``hpu/__init__.py:46``); ``HPUGraph`` and ``graph`` check the mode
    when they are created, so an SDK loaded again in the other mode (``core._load_mode``) needs nothing else here.
    The SDK's ``hpu`` has no ``__all__``, so ``from habana_frameworks.torch.hpu import *`` brings the graph names too:
    they join this module's ``__all__``.
    """
    module = sys.modules[__name__]
    for name, value in _GRAPH_API.items():
        setattr(module, name, value)
    exported = module.__dict__.setdefault("__all__", [])
    exported += [name for name in _GRAPH_API if name not in exported]


_not_emulated.provide(
    globals(),
    _SDK,
    tuple(name for name in _not_emulated.NAMES[_SDK] if name not in _GRAPH_API and name not in globals()),
)

__all__ = [
    "Event",
    "HABANA_VISIBLE_MODULES_VAR",
    "HLS_MODULE_ID_VAR",
    "MetricNotFoundError",
    "Stream",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "enable_recompute_sdp",
    "formatted_memory_stats",
    "get_arch_list",
    "getDeterministic",
    "get_autocast_hpu_dtype",
    "get_device_name",
    "get_gencode_flags",
    "get_rng_state",
    "get_rng_state_all",
    "get_sync_debug_mode",
    "hpu",
    "init",
    "initial_seed",
    "is_autocast_hpu_enabled",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "is_lazy",
    "is_recompute_FSDPA_enabled",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "metric_global",
    "metric_localcontext",
    "metrics_dump",
    "random",
    "recompute_sdp_enabled",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "sdp_kernel",
    "seed",
    "seed_all",
    "setDeterministic",
    "set_autocast_hpu_dtype",
    "set_autocast_hpu_enabled",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_sync_debug_mode",
    "stream",
    "synchronize",
    "version",
]
