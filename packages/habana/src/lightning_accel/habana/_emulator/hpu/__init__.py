"""Emulation of ``habana_frameworks.torch.hpu``: device queries, RNG, memory statistics and HPU graphs.

As in the SDK, ``hpu.hpu`` refers to this module itself, so ``torch_hpu.hpu.memory_stats()`` works too.
"""

from __future__ import annotations

import sys

from ._graph_cache import ModuleCacher, wrap_in_hpu_graph
from .device import (
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
from .graphs import HPUGraph, graph, is_current_stream_capturing, make_graphed_callables
from .memory import max_memory_allocated, memory_allocated, memory_stats, reset_peak_memory_stats
from .random import get_rng_state, initial_seed, manual_seed, manual_seed_all, seed, set_rng_state

hpu = sys.modules[__name__]

__all__ = [
    "HPUGraph",
    "ModuleCacher",
    "HABANA_VISIBLE_MODULES_VAR",
    "HLS_MODULE_ID_VAR",
    "current_device",
    "device_count",
    "get_device_name",
    "get_rng_state",
    "graph",
    "hpu",
    "initial_seed",
    "is_available",
    "is_current_stream_capturing",
    "is_initialized",
    "make_graphed_callables",
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
    "wrap_in_hpu_graph",
]
