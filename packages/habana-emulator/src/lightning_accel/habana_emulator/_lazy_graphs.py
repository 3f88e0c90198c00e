"""Lazy mode's graph compilations: one per graph the recipe cache has not seen, as the bridge counts them.

In lazy mode (``PT_HPU_LAZY_MODE=1``) the bridge accumulates the operators issued between two step marks into one
graph and compiles it when the step is marked (``htcore.mark_step()``, an HPU graph's capture begin, end and replay) or
when the host reads a result (``tensor.item()``, ``tensor.cpu()``), unless its recipe cache already holds that graph.
Each compilation emits ``GRAPH_COMPILE`` (gaudi-pytorch-bridge 1.19.0, ``backend/synapse_helpers/graph.cpp:612-620``),
which ``metric_global("graph_compilation")`` counts and ``detect_recompilation_auto_model`` reads; each lookup of the
recipe cache emits ``CACHE_HIT`` or ``CACHE_MISS`` (``metric_global("recipe_cache")`` with
``PT_HPU_ENABLE_CACHE_METRICS=1``).

The emulated device records the identity of the graph being built (each operator, with the shapes and dtypes of its
tensors and its integer arguments, in order; floating-point values are data) and reports it when the graph ends;
this module is the cache: a graph not seen before in this process counts one compilation. So a new batch size, or a
branch taken for the first time, compiles, and the same step again does not. Where it differs from Gaudi: the
bridge's key holds more (layouts, permutations), the cache is the process's own (``PT_HPU_RECIPE_CACHE_CONFIG``'s
disk cache is not read), and the compilation time is reported as 0 (nothing is compiled here).
"""

from __future__ import annotations

import threading

from . import _native

__all__ = ["discard_graph", "end_graph", "install"]

_lock = threading.Lock()
_cached: set[int] = set()


def _on_graph(identity: int, operators: int) -> None:
    with _lock:
        hit = identity in _cached
        _cached.add(identity)
    from .hpu.metrics import metrics

    # As the bridge's launch (hpu_habana_launch_op_pt.cpp:4914-4972): a cache lookup, then a compilation on a miss.
    metrics._record_recipe_lookup(str(identity), hit)
    if not hit:
        metrics._record_graph_compilation(f"lazy_graph_{identity:016x}_{operators}_ops", 0)


def install(lazy: bool) -> None:
    """Record graphs in lazy mode; in eager mode (per-operator recipes, no graph compilations counted) stop."""
    _native.device().set_lazy_graph_listener(_on_graph if lazy else None)


def end_graph() -> None:
    """A step mark: the graph built since the last one is compiled unless cached (nothing in eager mode)."""
    _native.device().end_lazy_graph()


def discard_graph() -> None:
    """Forget the graph being built: an HPU graph capture compiles its work as a graph of its own."""
    _native.device().discard_lazy_graph()
