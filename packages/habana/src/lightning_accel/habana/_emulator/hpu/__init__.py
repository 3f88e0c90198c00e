"""Emulation of ``habana_frameworks.torch.hpu``: device queries, RNG, memory statistics and HPU graphs.

As in the SDK, ``hpu.hpu`` refers to this module itself, so ``torch_hpu.hpu.memory_stats()`` works too.

The HPU graph APIs (``HPUGraph``, ``graph``, ``make_graphed_callables``, ``ModuleCacher``, ``wrap_in_hpu_graph``)
are exported only in lazy mode, as the SDK does (``if is_lazy(): from .graphs import *``, gaudi-pytorch-bridge
``python_packages/habana_frameworks/torch/hpu/__init__.py``); in the default eager mode they are absent and using
them is an ``AttributeError``. The mode is decided when the SDK loads (see ``core``).
"""

from __future__ import annotations

import sys

from . import _graph_cache, graphs, random
from ._devices import (
    HABANA_VISIBLE_MODULES_VAR,
    HLS_MODULE_ID_VAR,
    current_device,
    device_count,
    get_device_name,
    is_available,
    is_initialized,
    set_device,
    synchronize,
    visible_device_count,
)
from .memory import (
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
)
from .random import get_rng_state, initial_seed, manual_seed, manual_seed_all, seed, set_rng_state
from .streams import Event, Stream, current_stream, default_stream, stream

hpu = sys.modules[__name__]

GRAPH_API = {
    "HPUGraph": graphs.HPUGraph,
    "graph": graphs.graph,
    "is_current_stream_capturing": graphs.is_current_stream_capturing,
    "make_graphed_callables": graphs.make_graphed_callables,
    "ModuleCacher": _graph_cache.ModuleCacher,
    "wrap_in_hpu_graph": _graph_cache.wrap_in_hpu_graph,
}


def export_graph_api(lazy: bool) -> None:
    """Emulator only: export the HPU graph APIs from this module in lazy mode, remove them in eager mode."""
    module = sys.modules[__name__]
    for name, value in GRAPH_API.items():
        if lazy:
            setattr(module, name, value)
        else:
            module.__dict__.pop(name, None)


__all__ = [
    "Event",
    "Stream",
    "current_stream",
    "default_stream",
    "max_memory_cached",
    "max_memory_reserved",
    "memory_cached",
    "memory_reserved",
    "random",
    "reset_max_memory_allocated",
    "stream",
    "HABANA_VISIBLE_MODULES_VAR",
    "HLS_MODULE_ID_VAR",
    "current_device",
    "device_count",
    "export_graph_api",
    "get_device_name",
    "get_rng_state",
    "hpu",
    "initial_seed",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "memory_allocated",
    "memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "set_device",
    "set_rng_state",
    "synchronize",
    "visible_device_count",
]
