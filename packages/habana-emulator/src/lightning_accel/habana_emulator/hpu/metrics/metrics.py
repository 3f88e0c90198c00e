"""Emulation of ``habana_frameworks.torch.hpu.metrics.metrics``: global and local runtime metrics.

The SDK's metrics (gaudi-pytorch-bridge bcc5172, ``python_packages/habana_frameworks/torch/hpu/metrics/metrics.py``)
subscribe to topics of the bridge's C++ ``EventDispatcher``, which queues each event for each subscription; a metric
takes its queued events when it is read (``stats()``), reset or stopped (``process()``). The emulator has no such
dispatcher (the SDK's ``utils.event_dispatcher`` module is not emulated); its metrics subscribe to a small in-process
dispatcher that queues the same way, and the emulator emits the events where it does the same work:

* ``graph_compilation`` (``TotalNumber``, ``TotalTime`` and ``AvgTime`` in microseconds, ``recipe`` with
  ``PT_HPU_METRICS_GC_DETAILS=1``): the bridge emits ``GRAPH_COMPILE`` for every Synapse graph compiled outside
  eager mode's per-operator recipes (1.19 ``backend/synapse_helpers/graph.cpp:612-620``). The emulator counts each
  graph ``hpu_backend`` compiles (one per Dynamo graph, with Inductor's compile time), each HPU graph capture, and in
  lazy mode each graph between step marks not built before in the process (``_lazy_graphs``, 0 µs).
* ``cpu_fallback`` (``TotalNumber``, ``FallbackOps``): the bridge counts each operator that its boxed fallback sends
  to the CPU (1.19 ``hpu_ops/cpu_fallback.cpp:90-97``), i.e. each operator without an HPU kernel. The emulator counts
  each operator outside the bridge's own list of HPU kernels that reaches the device's boxed fallback (see
  ``_cpu_fallback``), by the same name (``aten::bincount``).
* ``memory_defragmentation`` (``TotalNumber``, ``TotalSuccessful``, ``AvgTime``, ``MaxTime``): the emulated device
  memory is host memory and is never defragmented: always zero.
* ``device_memory`` (a dict, the largest value seen per key): the bridge emits ``CTX_FINISH_BEFORE`` with
  ``peak_bytes`` and ``workspace_bytes`` when its device context finishes, at the end of the process. The emulator
  emits it once, at the process's exit before the exit dump, if the device was acquired: ``peak_bytes`` is the peak
  of ``memory_stats()`` (``MaxInUse``), ``workspace_bytes`` 0 (the emulator has no graph workspace). Until then the
  metric is empty, as on Gaudi.
* ``recipe_cache`` (``TotalHit``, ``RecipeHit``, ``TotalMiss``, ``RecipeMiss``), registered only with
  ``PT_HPU_ENABLE_CACHE_METRICS=1`` as on the SDK: the bridge emits ``CACHE_HIT`` or ``CACHE_MISS`` at each recipe
  lookup (1.19 ``backend/kernel/hpu_habana_launch_op_pt.cpp:4914-4972``), eager mode's per-operator recipes and graphs
  alike; the emulator emits them for lazy mode's graphs (``_lazy_graphs``, keyed by the graph's identity), not for
  eager operators.

At the process's exit the global metrics are dumped (``PT_HPU_METRICS_FILE``) only if the device was acquired, as the
SDK enables its saver on the bridge's ``DEVICE_ACQUIRED`` event, and then stopped.

Example:
    >>> from habana_frameworks.torch.hpu.metrics import metric_global, metric_localcontext
    >>> dict(metric_global("graph_compilation").stats())["TotalNumber"] >= 0
    True
    >>> with metric_localcontext("graph_compilation") as local:
    ...     pass
    >>> dict(local.stats())["TotalNumber"]
    0
"""

from __future__ import annotations

import abc
import atexit
import itertools
import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from statistics import mean
from typing import Any

from ... import _not_emulated
from .exceptions import MetricNotFoundError
from .saver import MetricDumpFormat, MetricDumpTrigger, MetricSaver

__all__ = [
    "CpuFallbackMetric",
    "DevMemMetric",
    "GraphCompilationMetric",
    "MemoryDefragmentationMetric",
    "Metric",
    "MetricDumpFormat",
    "MetricDumpTrigger",
    "MetricManager",
    "MetricNotFoundError",
    "MetricSaver",
    "RecipeCacheMetric",
    "bool_helper",
    "metric_debug_atexit",
    "metric_debug_enable_saver",
    "metric_debug_reload",
    "metric_global",
    "metric_localcontext",
    "metrics_dump",
]

_EventParams = Sequence[tuple[str, str]]
_EventCallback = Callable[[_EventParams], None]

# The emulator's stand-in for the bridge's EventDispatcher topics that metrics listen to.
_GRAPH_COMPILATION = "GRAPH_COMPILATION"
_CPU_FALLBACK = "CPU_FALLBACK"
_MEMORY_DEFRAGMENTATION = "MEMORY_DEFRAGMENTATION"
_CACHE_HIT = "CACHE_HIT"
_CACHE_MISS = "CACHE_MISS"
_CTX_FINISH_BEFORE = "CTX_FINISH_BEFORE"

# Subscription handle -> (topic, the events queued for it since it last processed them).
_subscriptions: dict[int, tuple[str, deque[_EventParams]]] = {}
_handles = itertools.count(1)


def _subscribe(event: str) -> int:
    handle = next(_handles)
    _subscriptions[handle] = (event, deque())
    return handle


def _unsubscribe(handle: int) -> None:
    _subscriptions.pop(handle, None)


def _process(handle: int, callback: _EventCallback) -> None:
    """Hand each event queued for ``handle`` to ``callback``, oldest first (the dispatcher's ``process``)."""
    subscription = _subscriptions.get(handle)
    while subscription is not None and subscription[1]:
        callback(subscription[1].popleft())


def _emit(event: str, params: _EventParams) -> None:
    for topic, queue in list(_subscriptions.values()):
        if topic == event:
            queue.append(params)


def _record_graph_compilation(recipe: str, duration_us: int) -> None:
    """Emulator only: report one graph compilation (what the bridge's ``GRAPH_COMPILE`` event carries)."""
    _emit(_GRAPH_COMPILATION, [("duration", str(int(duration_us))), ("recipe", recipe)])


def _record_recipe_lookup(recipe_id: str, hit: bool) -> None:
    """Emulator only: report one lookup of the recipe cache (the bridge's ``CACHE_HIT`` / ``CACHE_MISS`` event)."""
    _emit(_CACHE_HIT if hit else _CACHE_MISS, [("recipe_id", recipe_id)])


def _record_cpu_fallback(op_name: str) -> None:
    """Emulator only: report one operator run through the CPU fallback (the bridge's ``CPU_FALLBACK`` event)."""
    _emit(_CPU_FALLBACK, [("op_name", op_name)])


def _device_acquired() -> bool:
    from .. import _devices

    return _devices.is_initialized()


def _finish_device_context() -> None:
    """Emulator only: what the bridge reports as its device context finishes (``CTX_FINISH_BEFORE``)."""
    from .. import memory

    peak = memory.memory_stats()["MaxInUse"]
    _emit(_CTX_FINISH_BEFORE, [("peak_bytes", str(peak)), ("workspace_bytes", "0")])


def bool_helper(value: str) -> bool:
    """Whether an environment value reads as true (``y``, ``yes``, ``t``, ``true``, ``on``, ``1``)."""
    return value.lower() in ("y", "yes", "t", "true", "on", "1")


class Metric(metaclass=abc.ABCMeta):
    """A metric: a name and statistics, collected between ``start()`` and ``stop()``."""

    def __init__(self) -> None:
        self._metric_change_callback: Callable[[Any, str, Any], None] | None = None

    @abc.abstractmethod
    def name(self) -> str:
        """Returns metric name."""
        raise NotImplementedError

    @abc.abstractmethod
    def stats(self) -> Any:
        """Returns the collected statistics (a list of ``(name, value)`` pairs; ``device_memory``: a dict)."""
        raise NotImplementedError

    @abc.abstractmethod
    def reset(self) -> None:
        """Resets collected statistics."""
        raise NotImplementedError

    @abc.abstractmethod
    def start(self) -> None:
        """Starts collecting statistics."""
        raise NotImplementedError

    @abc.abstractmethod
    def stop(self) -> None:
        """Stops collecting statistics."""
        raise NotImplementedError

    @abc.abstractmethod
    def process(self) -> None:
        """Takes in the events queued since the last call."""
        raise NotImplementedError

    def on_metric_change(self, callback: Callable[[Any, str, Any], None]) -> None:
        """Registers callback called on every metric change (kept; no metric of this SDK calls it)."""
        self._metric_change_callback = callback


class _SubscribedMetric(Metric):
    # One subscription per topic, made at construction, as each SDK metric does; statistics, reset and stop take the
    # queued events in first.
    _events: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        self._handles: dict[str, int] = {}
        self.start()

    def _on_event(self, event: str, params: dict[str, str]) -> None:
        raise NotImplementedError

    def _collected(self) -> Any:
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Starts collecting statistics."""
        for event in self._events:
            if event not in self._handles:
                self._handles[event] = _subscribe(event)

    def process(self) -> None:
        """Takes in the events queued since the last call."""
        for event, handle in list(self._handles.items()):
            _process(handle, lambda params, event=event: self._on_event(event, dict(params)))  # type: ignore[misc]

    def stop(self) -> None:
        """Stops collecting statistics (after taking in what is queued)."""
        self.process()
        for handle in self._handles.values():
            _unsubscribe(handle)
        self._handles = {}

    def stats(self) -> Any:
        """The collected statistics, after taking in what is queued."""
        self.process()
        return self._collected()

    def reset(self) -> None:
        """Resets collected statistics (after taking in what is queued)."""
        self.process()
        self._clear()

    def __del__(self) -> None:
        # At interpreter exit this module's globals may already be gone; there is nothing left to unsubscribe from.
        try:
            for handle in self._handles.values():
                _unsubscribe(handle)
        except Exception:
            pass


class MemoryDefragmentationMetric(_SubscribedMetric):
    """``memory_defragmentation``: ``TotalNumber``, ``TotalSuccessful``, ``AvgTime``, ``MaxTime`` (milliseconds)."""

    _events = (_MEMORY_DEFRAGMENTATION,)

    def __init__(self) -> None:
        self._total_defragmentation_count = 0
        self._total_successful_defragmentation_count = 0
        self._defragmentation_time: list[int] = []
        super().__init__()

    def _on_event(self, event: str, params: dict[str, str]) -> None:
        self._total_defragmentation_count += 1
        if bool_helper(params["success"]):
            self._total_successful_defragmentation_count += 1
            self._defragmentation_time.append(int(params["milliseconds"]))

    def name(self) -> str:
        return "memory_defragmentation"

    def _collected(self) -> Sequence[tuple[str, Any]]:
        times = self._defragmentation_time
        return [
            ("TotalNumber", self._total_defragmentation_count),
            ("TotalSuccessful", self._total_successful_defragmentation_count),
            ("AvgTime", mean(times) if times else 0),
            ("MaxTime", max(times) if times else 0),
        ]

    def _clear(self) -> None:
        self._total_defragmentation_count = 0
        self._total_successful_defragmentation_count = 0
        self._defragmentation_time.clear()


class DevMemMetric(_SubscribedMetric):
    """``device_memory``: the largest value seen of each number the device reports when its context finishes."""

    _events = (_CTX_FINISH_BEFORE,)

    def __init__(self) -> None:
        self._stat: dict[str, int] = {}
        super().__init__()

    def _on_event(self, event: str, params: dict[str, str]) -> None:
        for key, value in params.items():
            self._stat[key] = max(int(value), self._stat.get(key, 0))

    def name(self) -> str:
        return "device_memory"

    def _collected(self) -> Mapping[str, int]:
        # A dict, not pairs, as the SDK's (the JSON dump takes either).
        return self._stat

    def _clear(self) -> None:
        self._stat = {}


class RecipeCacheMetric(_SubscribedMetric):
    """``recipe_cache``: ``TotalHit``, ``RecipeHit`` (per recipe), ``TotalMiss``, ``RecipeMiss`` (per recipe)."""

    _events = (_CACHE_HIT, _CACHE_MISS)

    def __init__(self) -> None:
        self.total_cache_hit = 0
        self.total_recipe_cache_hit: dict[str, int] = {}
        self.total_cache_miss = 0
        self.total_recipe_cache_miss: dict[str, int] = {}
        super().__init__()

    def _on_event(self, event: str, params: dict[str, str]) -> None:
        recipe_id = params["recipe_id"]
        if event == _CACHE_HIT:
            self.total_cache_hit += 1
            self.total_recipe_cache_hit[recipe_id] = self.total_recipe_cache_hit.get(recipe_id, 0) + 1
        else:
            self.total_cache_miss += 1
            self.total_recipe_cache_miss[recipe_id] = self.total_recipe_cache_miss.get(recipe_id, 0) + 1

    def name(self) -> str:
        return "recipe_cache"

    def _collected(self) -> Sequence[tuple[str, Any]]:
        return [
            ("TotalHit", self.total_cache_hit),
            ("RecipeHit", self.total_recipe_cache_hit),
            ("TotalMiss", self.total_cache_miss),
            ("RecipeMiss", self.total_recipe_cache_miss),
        ]

    def _clear(self) -> None:
        self.total_cache_hit = 0
        self.total_recipe_cache_hit = {}
        self.total_cache_miss = 0
        self.total_recipe_cache_miss = {}


class CpuFallbackMetric(_SubscribedMetric):
    """``cpu_fallback``: ``TotalNumber`` and ``FallbackOps`` (operator name -> count)."""

    _events = (_CPU_FALLBACK,)

    def __init__(self) -> None:
        self._total_fallback_count = 0
        self._total_op_fallback_count: dict[str, int] = {}
        super().__init__()

    def _on_event(self, event: str, params: dict[str, str]) -> None:
        self._total_fallback_count += 1
        op_name = params["op_name"]
        self._total_op_fallback_count[op_name] = self._total_op_fallback_count.get(op_name, 0) + 1

    def name(self) -> str:
        return "cpu_fallback"

    def _collected(self) -> Sequence[tuple[str, Any]]:
        return [("TotalNumber", self._total_fallback_count), ("FallbackOps", self._total_op_fallback_count)]

    def _clear(self) -> None:
        self._total_fallback_count = 0
        self._total_op_fallback_count = {}


class GraphCompilationMetric(_SubscribedMetric):
    """``graph_compilation``: ``TotalNumber``, ``TotalTime``, ``AvgTime`` (microseconds); ``recipe`` on request."""

    _events = (_GRAPH_COMPILATION,)

    def __init__(self) -> None:
        self._total_num_of_compilation = 0
        self._total_time_of_compilation = 0
        self._recipe_names: list[str] = []
        self._recipe_durations: list[int] = []
        super().__init__()

    def _on_event(self, event: str, params: dict[str, str]) -> None:
        duration = int(params["duration"])
        self._total_num_of_compilation += 1
        self._total_time_of_compilation += duration
        self._recipe_names.append(params["recipe"])
        self._recipe_durations.append(duration)

    def name(self) -> str:
        return "graph_compilation"

    def _collected(self) -> Sequence[tuple[str, Any]]:
        count = self._total_num_of_compilation
        result: dict[str, Any] = {
            "TotalNumber": count,
            "TotalTime": self._total_time_of_compilation,
            "AvgTime": float(self._total_time_of_compilation) / count if count > 0 else 0,
        }
        if bool_helper(os.environ.get("PT_HPU_METRICS_GC_DETAILS", "")):
            result["recipe"] = list(zip(self._recipe_names, self._recipe_durations, strict=True))
        return list(result.items())

    def _clear(self) -> None:
        # As the SDK: the recipe details are kept.
        self._total_num_of_compilation = 0
        self._total_time_of_compilation = 0


class MetricManager:
    """The registry of metric types and their global instances, and the process-exit dump."""

    def __init__(self) -> None:
        self._metrics_types: dict[str, type[Metric]] = {}
        self._global_metrics: list[Metric] = []
        self._metric_saver = MetricSaver()
        atexit.register(self._at_exit_callback)

    def __del__(self) -> None:
        # The SDK's metric_debug_reload drops a manager: its exit dump must not run any more.
        try:
            atexit.unregister(self._at_exit_callback)
            for metric in self._global_metrics:
                metric.stop()
        except Exception:
            pass

    def register(self, name: str, metric_class: type[Metric]) -> None:
        """Register a metric type and create its global instance.

        Raises:
            AssertionError: When ``name`` is already registered (the SDK's error).
        """
        if name in self._metrics_types:
            raise AssertionError(f"Metric with given name ({name}) is already registered")
        self._metrics_types[name] = metric_class
        self._global_metrics.append(metric_class())
        self._global_metrics[-1].on_metric_change(self._metric_saver.metric_change_callback)

    def unregister(self, name: str) -> None:
        """Stop the global metric of ``name`` and forget the type.

        Raises:
            AssertionError: When ``name`` is not registered (the SDK's error).
        """
        if name not in self._metrics_types:
            raise AssertionError(f"Metric with given name ({name}) is not registered")
        metric = self.get_global_metric(name)
        if metric is not None:
            metric.stop()
        del self._metrics_types[name]
        self._global_metrics = [m for m in self._global_metrics if m.name() != name]

    def get_global_metric(self, name: str) -> Metric | None:
        """The global metric of ``name``, or None (the SDK returns None for an unknown name)."""
        metrics = [m for m in self._global_metrics if m.name() == name]
        if len(metrics) > 1:
            raise AssertionError("There are more than one metric with given name")
        return metrics[0] if len(metrics) == 1 else None

    def get_local_metric(self, name: str) -> Metric:
        """A fresh metric of ``name``, collecting from now on.

        Raises:
            MetricNotFoundError: When no metric type is registered under ``name``.
        """
        if name in self._metrics_types:
            return self._metrics_types[name]()
        raise MetricNotFoundError(f"Metric with given name ({name}) doesn't exist.")

    def _at_exit_callback(self) -> None:
        if _device_acquired():
            # The SDK enables its saver on the bridge's DEVICE_ACQUIRED event; the device's context finishes next.
            self._metric_saver.enable()
            _finish_device_context()
        self._metric_saver.process_trigger(MetricDumpTrigger.process_exit, self._global_metrics)
        self._metric_saver.close()
        for metric in self._global_metrics:
            metric.stop()

    def store_global_metrics(self, file_name: str, format: MetricDumpFormat) -> None:
        """Write every global metric to ``file_name`` now."""
        saver = MetricSaver(file_name, triggers=[MetricDumpTrigger.user], format=format)
        saver.enable()
        saver.process_trigger(MetricDumpTrigger.user, self._global_metrics)
        saver.close()


_metric_mgr: MetricManager | None = None


def _init_metric_mgr() -> None:
    global _metric_mgr
    _metric_mgr = MetricManager()
    _metric_mgr.register("graph_compilation", GraphCompilationMetric)
    _metric_mgr.register("cpu_fallback", CpuFallbackMetric)
    _metric_mgr.register("memory_defragmentation", MemoryDefragmentationMetric)
    _metric_mgr.register("device_memory", DevMemMetric)
    if bool_helper(os.environ.get("PT_HPU_ENABLE_CACHE_METRICS", "")):
        _metric_mgr.register("recipe_cache", RecipeCacheMetric)


_init_metric_mgr()


def _manager() -> MetricManager:
    assert _metric_mgr is not None  # made at import, replaced only by metric_debug_reload
    return _metric_mgr


def metric_debug_reload() -> None:
    """A debugging aid of the SDK: drop the global metrics and their manager and make them anew (counts restart)."""
    global _metric_mgr
    old, _metric_mgr = _metric_mgr, None
    del old
    _init_metric_mgr()


def metric_debug_atexit() -> None:
    """A debugging aid of the SDK: do now what the process's exit does (dump and stop the global metrics)."""
    _manager()._at_exit_callback()


def metric_debug_enable_saver() -> None:
    """A debugging aid of the SDK: let the global saver write (the SDK does it when the device is acquired)."""
    _manager()._metric_saver.enable()


def metric_global(name: str) -> Metric:
    """Returns global metric by name (None for a name no metric has, as on the SDK)."""
    return _manager().get_global_metric(name)  # type: ignore[return-value]


@contextmanager
def metric_localcontext(name: str) -> Iterator[Metric]:
    """Context-manager metric API: collects only inside the ``with`` block.

    Raises:
        MetricNotFoundError: When no metric has ``name``.
    """
    metric = _manager().get_local_metric(name)
    try:
        yield metric
    finally:
        metric.stop()


def metrics_dump(file_name: str, format: MetricDumpFormat = MetricDumpFormat.json) -> None:
    """Stores global metrics in given file (a taken name gets ``.1``, ``.2`` ... appended)."""
    _manager().store_global_metrics(file_name, format=format)


_not_emulated.provide(globals(), "habana_frameworks.torch.hpu.metrics.metrics")
