"""Graph caches keyed as the SDK keys them: the emulated ``ModuleCacher``, ``wrap_in_hpu_graph``, its function form.

As on the SDK (gaudi-pytorch-bridge bcc5172, the SDK 1.24 period, ``habana_frameworks/torch/hpu/graphs.py``), the key
of a call is ``input_hash`` of its inputs: each tensor's dtype, shape and view chain, a dataclass's fields, other
values by ``hash``, and whether HPU autocast is on. A tensor's device and ``requires_grad`` are not in the key: a call
that differs only there replays the graph of the first, its tensors copied into that graph's inputs. (Bridge 1.19.0
left the dtype out too, ``:488-499``; from the 1.24 period on another dtype is another graph.)

The caller's own tensors of the capturing call are the graph's static inputs (``wrapped_hpugraph_forward``:
``graph_inputs = inputs``; 1.19.0 ``:615``; ``make_graphed_callables`` keeps ``sample_args``, ``:256``): a later call
with the same key copies its tensors into them (``copy_to``, 1.19.0 ``:644``; ``static_input_surface[i].copy_
(inputs[i])``, ``:403``; unchanged at bcc5172). A step that keeps the first batch's tensor therefore sees it hold the
latest batch's values, as on Gaudi.

Neither cache evicts: once ``max_graphs`` graphs are cached, a call with a new key runs the original forward
uncaptured (``wrapped_hpugraph_forward``: ``if max_graphs is not None and len(cache) == max_graphs: return
orig_fwd(...)``, 1.19.0 ``:600-601``; ``ModuleCacher.forward`` inserts only while ``len(self.model_dict) <
self.max_graphs`` and otherwise counts an uncached hit, ``:1012-1023``; both unchanged at bcc5172). The graphs cached
first stay until ``module.clear_cache()`` (``wrap_in_hpu_graph`` only; ``ModuleCacher`` and ``wrap_in_hpu_graph_func``
have no way to drop them).

From the 1.24 period on ``wrap_in_hpu_graph`` and ``wrap_in_hpu_graph_func`` take ``free_inplace``, ``verbose`` and
``log_frequency``, and ``dry_run`` defaults to ``None`` (then ``disable_tensor_cache``'s value); ``wrap_in_hpu_graph``
adds ``module.log_statistics()``, and ``log_stats`` prints the statistics the SDK counts process-wide.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ._graphed_callables import graph_autograd
from ._hpu_graph import HPUGraph, graph, refuse_compiled

__all__ = ["ModuleCacher", "forward_parameters", "log_stats", "wrap_in_hpu_graph", "wrap_in_hpu_graph_func"]

_REFUSED_KINDS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)


def _input_hash(obj: Any) -> int:
    from .graphs import input_hash  # the graphs module imports this one

    return input_hash(obj)


def _copy_to(dst: Any, src: Any) -> None:
    from .graphs import copy_to  # the graphs module imports this one

    copy_to(dst, src)


def forward_parameters(forward: Callable[..., Any], model: object) -> collections.OrderedDict[str, Any]:
    """The parameters of ``forward`` with their defaults, as the SDK's ``GraphModel.process_function_signature``.

    The SDK calls the model with keyword arguments only (``GraphModel.forward``: ``self.model(**full_args)``,
    ``graphs.py:846-850``), so it asserts that ``forward`` has no positional-only parameter and no ``*args``
    (``:876-890``); a ``**kwargs`` parameter is dropped with a printed warning, and keyword arguments still reach
    ``forward`` (``get_full_args``, ``:893-900``).

    Raises:
        AssertionError: When ``forward`` has ``*args`` or a positional-only parameter (the SDK's assertion).
    """
    found: collections.OrderedDict[str, Any] = collections.OrderedDict()
    for name, parameter in inspect.signature(forward).parameters.items():
        if parameter.kind in _REFUSED_KINDS:
            shown = f"*{name}" if parameter.kind is inspect.Parameter.VAR_POSITIONAL else f"{name}, /"
            raise AssertionError(
                f"Unsupported argument type : {parameter.kind} (ModuleCacher(...)(model={type(model).__name__}): its "
                f"forward has the parameter `{shown}`; the SDK's ModuleCacher calls forward with keyword arguments "
                "only). Give forward named parameters, or graph the module with wrap_in_hpu_graph instead."
            )
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            print("[WARNING] Variable keyword arguments will not be supported.")  # the SDK's own print (:886)
            continue
        found[name] = parameter.default
    return found


def _full_args(
    parameters: collections.OrderedDict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> collections.OrderedDict[str, Any]:
    # GraphModel.get_full_args (graphs.py:893-900): defaults, then positionals in order, then keywords.
    if len(args) > len(parameters):
        # The SDK drops the extra positionals silently; the plain forward would refuse them.
        raise TypeError(
            f"A ModuleCacher-wrapped forward takes {len(parameters)} arguments ({', '.join(parameters)}), got "
            f"{len(args)} positional ones. Pass at most {len(parameters)}, or by keyword."
        )
    full = copy.copy(parameters)
    for name, value in zip(parameters, args, strict=False):
        full[name] = value
    full.update(kwargs)
    return full


def _check_max_graphs(max_graphs: Any, owner: str, allow_none: bool) -> None:
    valid = isinstance(max_graphs, int) and not isinstance(max_graphs, bool) and max_graphs >= 1
    if not (valid or (allow_none and max_graphs is None)):
        raise ValueError(
            f"{owner}(max_graphs={max_graphs!r}) is not accepted. Accepted: a positive int (how many graphs to cache)"
            f"{' or None (no limit)' if allow_none else ''}."
        )


def _split(leaves: list[Any]) -> tuple[list[int], list[torch.Tensor]]:
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    return positions, [leaves[i] for i in positions]


class _GraphedCall:
    """One input key of a ModuleCacher: the forward and backward graphs of the module (the SDK's ``GraphModel``)."""

    def __init__(
        self,
        forward: Callable[..., Any],
        full_args: collections.OrderedDict[str, Any],
        params: tuple[torch.Tensor, ...],
        allow_unused_input: bool,
    ) -> None:
        leaves, spec = tree_flatten(full_args)
        self.positions, tensors = _split(leaves)
        constants = list(leaves)
        self.out_spec: Any = None
        self.out_constants: list[Any] = []

        def tensors_only(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            full = list(constants)
            for position, tensor in zip(self.positions, inputs, strict=False):
                full[position] = tensor
            out_leaves, self.out_spec = tree_flatten(forward(**tree_unflatten(full, spec)))
            self.out_constants = out_leaves
            return tuple(leaf for leaf in out_leaves if isinstance(leaf, torch.Tensor))

        # The caller's own tensors become the graph's static inputs, as the SDK's GraphModel.init_hpu_graph passes
        # them to make_graphed_callables (graphs.py:858-869), which keeps them (:256) and copies later calls' tensors
        # into them (:400-403).
        self.graphed = graph_autograd(
            tensors_only, tuple(tensors), params, 0, allow_unused_input, first_call_is_capture=True
        )

    def __call__(self, full_args: collections.OrderedDict[str, Any]) -> Any:
        _, tensors = _split(tree_flatten(full_args)[0])
        filled = iter(self.graphed(*tensors))
        out_leaves = [next(filled) if isinstance(leaf, torch.Tensor) else leaf for leaf in self.out_constants]
        return tree_unflatten(out_leaves, self.out_spec)


class ModuleCacher:
    """Cache one HPU graph per input key of a module's training forward, for the first ``max_graphs`` keys.

    Calls in training mode with gradients enabled (and lazy mode, as on the SDK) run graphs: a new key (``input_hash``
    of the forward's arguments: dtypes, shapes, views, autocast state, other values) is captured (forward and backward,
    executing the work) while fewer than ``max_graphs`` graphs are cached, a known one replayed. Once ``max_graphs``
    graphs are cached, a new key runs the original forward, uncaptured, and is counted in ``uncached_train_hits``, as
    on the SDK: nothing is evicted. Other calls (evaluation, ``torch.no_grad``, and every call in eager mode, where
    the SDK's cacher graphs nothing and raises nothing) run the original forward too. With ``verbose=True`` the
    statistics (:meth:`log_stats`) are printed every ``log_frequency`` forwards, from the first, at ``capture_end()``
    and when the cacher is freed, as the SDK prints them.

    As on the SDK (bridge 1.19.0 ``hpu/graphs.py:907-1111``, unchanged at bcc5172): the forward is called with
    keyword arguments only, so a forward with ``*args`` or positional-only parameters is refused when wrapped
    (``AssertionError``);
    ``allow_unused_input`` (default False) is passed to the graphs, so a trainable parameter or input that does not
    reach the outputs is an error from ``torch.autograd.grad`` at the capture unless it is True; the first call's
    input tensors become the graph's static inputs, and later calls with the same key copy their tensors into them.

    Args:
        max_graphs: How many graphs to cache.

    Example:
        >>> from lightning_accel.habana.sdk import htcore  # doctest: +SKIP
        >>> model = htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)  # doctest: +SKIP
    """

    def __init__(self, max_graphs: int = 10) -> None:
        _check_max_graphs(max_graphs, "ModuleCacher", allow_none=False)
        self.max_graphs = max_graphs
        # The graphs cached, by input key (the SDK's attribute of this name).
        self.model_dict: dict[Hashable, _GraphedCall] = {}
        self.cached_hits_dict: dict[Hashable, int] = {}
        self.uncached_train_hits = 0
        self.uncached_eval_hits = 0
        self.model: torch.nn.Module | None = None
        self._forward: Callable[..., Any] | None = None
        self.forward_params: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.allow_unused_input = False
        self.have_grad_accumulation = False
        # The micro-step the caller says it is in (set_iteration_count), and how often it said so.
        self.forward_cnt = 0
        self.set_iterations_call_cnt = 0
        # True while a graph is being captured (is_hpugraph_tracing), as the SDK's cache_insert sets it.
        self.hpugraph_tracing = False
        # use_lfu=True: graph only the keys seen most often between capture_start() and capture_end()
        # (graphs.py:1043-1079): a window that counts keys, then the max_graphs most frequent become the priority keys.
        self.use_lfu = False
        self.is_capturing = False
        self.input_count_dict: dict[Hashable, int] = {}
        self.priority_keys: list[Hashable] = []
        self.asynchronous = False
        # Statistics printouts: every log_frequency forwards counted from 0 (the SDK starts its count at -1).
        self.verbose = False
        self.log_frequency = 100
        self.iteration_cnt = -1

    def is_hpugraph_tracing(self) -> bool:
        """Whether a graph is being captured now (a forward can ask, through ``model.is_hpugraph_tracing()``)."""
        return self.hpugraph_tracing

    def capture_start(self) -> None:
        """With ``use_lfu=True``: start counting the input keys of the forwards (run uncaptured meanwhile)."""
        self.is_capturing = True

    def record(self, input_id: Hashable) -> None:
        """Count one forward of ``input_id`` in the ``capture_start`` window."""
        self.input_count_dict[input_id] = self.input_count_dict.get(input_id, 0) + 1

    def capture_end(self) -> None:
        """End the window: the ``max_graphs`` keys counted most often are the ones graphed from now on."""
        counts = self.input_count_dict
        self.priority_keys = sorted(counts, key=lambda key: counts[key], reverse=True)[: self.max_graphs]
        self.is_capturing = False
        if self.verbose:
            self.log_stats()
        self.input_count_dict = {}

    def set_iteration_count(self, iter_num: int) -> None:
        """Say which micro-step of a gradient accumulation the next forward is (0: the first, whose grads are fresh).

        With ``have_grad_accumulation=True``, the first micro-step gets graphs of its own (``graphs.py:972-974``,
        ``:1001-1007``): the parameters' ``.grad`` of that step can be the backward graph's own gradient tensors, so
        later micro-steps must write theirs elsewhere for ``.grad`` to accumulate.
        """
        self.forward_cnt = iter_num
        self.set_iterations_call_cnt += 1

    def __call__(
        self,
        model: torch.nn.Module,
        use_lfu: bool = False,
        inplace: bool = True,
        allow_unused_input: bool = False,
        asynchronous: bool = False,
        have_grad_accumulation: bool = False,
        log_frequency: int = 100,
        verbose: bool = False,
        disable_tensor_cache: bool = False,
        dry_run: bool = False,
    ) -> torch.nn.Module:
        """Route ``model``'s forward through the cache; returns the model (a shallow copy unless ``inplace``).

        ``verbose`` and ``log_frequency`` print :meth:`log_stats`; ``asynchronous`` is printed there and changes no
        result on the emulator (its device runs in order); ``disable_tensor_cache`` and ``dry_run`` are settings of
        the SDK's graphs' memory (the emulated graphs keep their tensors and execute at capture, with the same
        results).

        Raises:
            TypeError: When ``model`` is not an ``nn.Module``, ``verbose`` not a bool, or ``log_frequency`` not a
                positive int while ``verbose`` is True.
            RuntimeError: When ``model`` was compiled with ``torch.compile``.
            AssertionError: When ``model.forward`` has ``*args`` or a positional-only parameter (as the SDK).
        """
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"ModuleCacher(...)(model=...) needs a torch.nn.Module, got {type(model).__name__}.")
        if not isinstance(verbose, bool):
            raise TypeError(f"ModuleCacher(...)(verbose={verbose!r}) is not accepted. Accepted: True or False.")
        if verbose and (isinstance(log_frequency, bool) or not isinstance(log_frequency, int) or log_frequency < 1):
            # The SDK divides the forward count by it: 0 would be a ZeroDivisionError at the first forward.
            raise TypeError(
                f"ModuleCacher(...)(log_frequency={log_frequency!r}) is not accepted with verbose=True. Accepted: a "
                "positive int, the number of forwards between two statistics printouts."
            )
        refuse_compiled(model, "model")
        if not inplace:
            model = copy.copy(model)
        self.forward_params = forward_parameters(model.forward, model)
        # The caller's choice, as the SDK passes it to every graph it builds (graphs.py:1099, :987-989, :862-868).
        self.allow_unused_input = allow_unused_input
        self.have_grad_accumulation = have_grad_accumulation
        self.use_lfu = use_lfu
        self.asynchronous = asynchronous
        self.verbose = verbose
        self.log_frequency = log_frequency
        self._forward = model.forward
        self.model = model
        # Plain attributes on the module, as the SDK sets them (graphs.py:1086-1104; nn.Module's typing knows only
        # tensors and modules). They hold this cacher, and so its graphs, for as long as the module keeps them.
        object.__setattr__(model, "is_hpugraph_tracing", self.is_hpugraph_tracing)
        object.__setattr__(model, "orig_forward", self._forward)
        object.__setattr__(model, "forward", self.forward)
        object.__setattr__(model, "set_iteration_count", self.set_iteration_count)
        object.__setattr__(model, "capture_start", self.capture_start)
        object.__setattr__(model, "capture_end", self.capture_end)
        return model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Replay (or capture) the graph of this input key, or run the original forward."""
        assert self.model is not None and self._forward is not None
        from ..core import is_lazy  # the core module imports this package

        self.iteration_cnt += 1
        if self.verbose and self.iteration_cnt % self.log_frequency == 0:
            self.log_stats()
        if self.model.training and torch.is_grad_enabled() and is_lazy():
            full_args = _full_args(self.forward_params, args, kwargs)
            # GraphModel.full_input_hash (graphs.py:903-904, :998): the SDK's input_hash of the full arguments.
            key = _input_hash(full_args)
            if self.have_grad_accumulation and self.forward_cnt == 0:
                key = _input_hash((key, self.forward_cnt + 1))  # graphs.py:1001-1007
            counting = self.use_lfu and self.is_capturing
            if counting:
                self.record(key)  # forward_lfs: counted, and run uncaptured
            entry = None if counting else self.model_dict.get(key)
            may_insert = key in self.priority_keys if self.use_lfu else len(self.model_dict) < self.max_graphs
            if entry is None and may_insert and not counting:
                self._check_buffers()
                params = tuple(self.model.parameters())
                self.hpugraph_tracing = True
                try:
                    entry = _GraphedCall(self._forward, full_args, params, self.allow_unused_input)
                finally:
                    self.hpugraph_tracing = False
                self.model_dict[key] = entry
            if entry is not None:
                self.cached_hits_dict[key] = self.cached_hits_dict.get(key, 0) + 1
                return entry(full_args)
        if self.model.training:
            self.uncached_train_hits += 1
        else:
            self.uncached_eval_hits += 1
        return self._forward(*args, **kwargs)

    def _check_buffers(self) -> None:
        # The SDK captures through make_graphed_callables, whose assertion on buffers then applies (graphs.py:244-248).
        assert self.model is not None
        if any(b.requires_grad for b in self.model.buffers()):
            raise AssertionError(
                "In any :class:`~torch.nn.Module` passed to :func:`~make_graphed_callables`, only parameters may be "
                f"trainable. All buffers must have ``requires_grad=False``. ({type(self.model).__name__} has a buffer "
                "that requires grad: make it an nn.Parameter or set requires_grad=False on it.)"
            )

    def log_stats(self) -> None:
        """Print the cache statistics, with the SDK's rows, then the device memory statistics."""
        from . import memory  # the memory module imports the hpu package, which imports this one

        cached = sum(self.cached_hits_dict.values())
        rows = [
            ("Max graphs", self.max_graphs),
            ("LFU Cache", self.use_lfu),
            ("Async execution config", self.asynchronous),
            ("Grad accumulation config", self.have_grad_accumulation),
            ("Set iteration calls", self.set_iterations_call_cnt),
            None,
            ("No. of HPUGraphs cached", len(self.model_dict)),
            ("Priority keys", self.priority_keys),
            ("Input hash v. cached hits", self.cached_hits_dict),
            ("Total cached hits", cached),
            ("Uncached train hits", self.uncached_train_hits),
            ("Uncached eval hits", self.uncached_eval_hits),
            ("Total forwards executed", cached + self.uncached_train_hits + self.uncached_eval_hits),
        ]
        if self.use_lfu and self.input_count_dict:
            rows.append(("Input hash v. count", self.input_count_dict))
        lines = ["HPU Graph Statistics", "  Configs"]
        lines += ["  Cache info " if row is None else f"    {row[0]:<26}:- {row[1]}" for row in rows]
        lines += ["  HPU Memory info ", memory.formatted_memory_stats()]
        print("\n".join(lines))

    def __del__(self) -> None:
        # The SDK's cacher prints its statistics a last time when it is freed, with verbose=True.
        if getattr(self, "verbose", False):
            self.log_stats()


class _ForwardGraph:
    """One input key of ``wrap_in_hpu_graph``: the graph, its inputs (the caller's own tensors) and its outputs."""

    def __init__(self, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # As wrapped_hpugraph_forward: the capture runs on the caller's inputs, which stay the graph's inputs, and its
        # outputs (with their autograd history, when grad is on) are what replays return.
        self.inputs = (args, kwargs)
        self.graph = HPUGraph()
        with graph(self.graph):
            self.outputs = forward(*args, **kwargs)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        _copy_to(self.inputs, (args, kwargs))
        self.graph.replay()
        return self.outputs


class _Counters:
    """What the SDK counts over every ``wrap_in_hpu_graph`` of the process (its ``CachedParams``' class attributes)."""

    def __init__(self) -> None:
        self.iteration_cnt = 0  # calls of every wrapped forward, bypassed ones included
        self.cache_hits: dict[Hashable, int] = {}  # replays, by input key
        self.skip_replay_cnt: dict[Hashable, int] = {}  # warmup_mode calls, by input key
        self.bypass_hpu_graphs = 0  # bypass_hpu_graphs=True calls


_counters = _Counters()

_DISABLE_TENSOR_CACHE_VAR = "PT_HPUGRAPH_DISABLE_TENSOR_CACHE"


@dataclasses.dataclass(frozen=True)
class _WrapSettings:
    """The arguments of one ``wrap_in_hpu_graph`` (or ``wrap_in_hpu_graph_func``) call."""

    asynchronous: bool
    disable_tensor_cache: bool
    dry_run: bool | None
    max_graphs: int | None
    free_inplace: bool
    verbose: bool
    log_frequency: int

    @classmethod
    def checked(cls, owner: str, **values: Any) -> _WrapSettings:
        for name in ("asynchronous", "disable_tensor_cache", "free_inplace", "verbose"):
            if not isinstance(values[name], bool):
                raise TypeError(f"{owner}({name}={values[name]!r}) is not accepted. Accepted: True or False.")
        if values["dry_run"] is not None and not isinstance(values["dry_run"], bool):
            raise TypeError(
                f"{owner}(dry_run={values['dry_run']!r}) is not accepted. Accepted: None (a dry run when the tensor "
                "cache is disabled, the SDK's default), True or False."
            )
        frequency = values["log_frequency"]
        if isinstance(frequency, bool) or not isinstance(frequency, int):
            raise TypeError(
                f"{owner}(log_frequency={frequency!r}) is not accepted. Accepted: an int, the number of wrapped calls "
                "between two statistics printouts with verbose=True (0 or less: never)."
            )
        _check_max_graphs(values["max_graphs"], owner, allow_none=True)
        return cls(**values)

    def resolved(self) -> tuple[bool, bool]:
        """``disable_tensor_cache`` and ``dry_run`` as a call reads them (the SDK reads the variable at each call)."""
        raw = os.environ.get(_DISABLE_TENSOR_CACHE_VAR)
        if raw not in (None, "", "0", "1"):
            # The SDK compares with "1" and reads anything else as "0"; a "true" meant as on is refused instead.
            raise ValueError(
                f"{_DISABLE_TENSOR_CACHE_VAR}={raw!r} is not accepted. Accepted: '1' (disable the tensor cache of "
                "every wrap_in_hpu_graph) or '0' (keep it); unset, the disable_tensor_cache argument decides."
            )
        disable_tensor_cache = self.disable_tensor_cache if raw is None else raw == "1"
        return disable_tensor_cache, disable_tensor_cache if self.dry_run is None else self.dry_run

    def log(self, cache: dict[Hashable, _ForwardGraph], resolved: tuple[bool, bool]) -> None:
        disable_tensor_cache, dry_run = resolved
        log_stats(self.max_graphs, disable_tensor_cache, cache, self.asynchronous, dry_run)

    def log_if_due(self, cache: dict[Hashable, _ForwardGraph], resolved: tuple[bool, bool]) -> None:
        if self.verbose and self.log_frequency > 0 and _counters.iteration_cnt % self.log_frequency == 0:
            self.log(cache, resolved)


def _row(label: str, value: Any) -> str:
    return f"    {label:<40}:- {value}"


def log_stats(max_graphs: Any, disable_tensor_cache: Any, cache: Any, asynchronous: Any, dry_run: Any) -> None:
    """Print the statistics of the process's ``wrap_in_hpu_graph`` caches, as the SDK's ``log_stats`` does.

    The settings passed in (``max_graphs``, ``asynchronous``, ``disable_tensor_cache``, ``dry_run``) are printed as
    given, with the number of graphs in ``cache``, the replays per input key, the warm-up calls and the bypassed calls
    of every wrapped forward of the process (the SDK counts them process-wide), then the device memory statistics.
    ``module.log_statistics()`` of a wrapped module, and ``verbose=True``, print it for their own cache.

    Args:
        max_graphs: The cache's limit, printed.
        disable_tensor_cache: Printed.
        cache: The graphs (anything with a length): only their number is printed.
        asynchronous: Printed.
        dry_run: Printed.

    Example:
        >>> model = wrap_in_hpu_graph(model)  # doctest: +SKIP
        >>> model.log_statistics()  # doctest: +SKIP
    """
    from . import memory  # the memory module imports the hpu package, which imports this one

    lines: list[str] = []
    if len(cache):
        lines += ["HPU Graph Inference Statistics", "  Configs "]
        lines += [_row("Max graphs", max_graphs), _row("Async execution config", asynchronous)]
        lines += [_row("Disable Tensor Cache", disable_tensor_cache), _row("Dry Run", dry_run), "  Cache info "]
        lines += [_row("No. of HPUGraphs cached", len(cache)), _row("Input hash v. cached hits", _counters.cache_hits)]
        lines.append(_row("Total cached hits", sum(_counters.cache_hits.values())))
        lines.append(_row("Total HPUGraph warmups", sum(_counters.skip_replay_cnt.values())))
    else:
        lines.append("  Bypassed HPUGraphs info ")
    lines += [_row("Total HPUGraphs bypassed", _counters.bypass_hpu_graphs), "  HPU Memory info "]
    lines.append(memory.formatted_memory_stats())
    print("\n".join(lines))


def _wrapped_forward(
    cache: dict[Hashable, _ForwardGraph],
    original: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    settings: _WrapSettings,
) -> Any:
    """One call of a wrapped forward: capture, replay or run uncaptured (the SDK's ``wrapped_hpugraph_forward``)."""
    _counters.iteration_cnt += 1
    # The SDK's keyword arguments for the graph, never passed on.
    warmup_mode = kwargs.pop("warmup_mode", False)
    if kwargs.pop("bypass_hpu_graphs", False):
        _counters.bypass_hpu_graphs += 1
        return original(*args, **kwargs)
    # The key is taken before cache_tensors_list is removed, so it is part of the key, as on the SDK.
    key = _input_hash((args, kwargs))
    # The outputs to keep with disable_tensor_cache: the emulated graphs keep all of their tensors.
    kwargs.pop("cache_tensors_list", None)
    resolved = settings.resolved()  # read at each call, as the SDK reads PT_HPUGRAPH_DISABLE_TENSOR_CACHE
    entry = cache.get(key)
    if entry is None:
        if settings.max_graphs is not None and len(cache) == settings.max_graphs:
            return original(*args, **kwargs)
        # Captured whether or not gradients are on, as on the SDK: later calls return these same outputs, whose
        # autograd history is the capture's (a second backward through them is torch's error). A dry run (the SDK
        # records without executing, then replays once) and this capture (executes once) compute the same outputs.
        entry = cache[key] = _ForwardGraph(original, args, kwargs)
        settings.log_if_due(cache, resolved)
        return entry.outputs
    if warmup_mode:
        # As the SDK: a warm-up call marks the step and returns the graph's outputs without replaying it.
        from ..core import mark_step  # the core imports this package

        mark_step()
        _counters.skip_replay_cnt[key] = _counters.skip_replay_cnt.get(key, 0) + 1
        settings.log_if_due(cache, resolved)
        return entry.outputs
    _counters.cache_hits[key] = _counters.cache_hits.get(key, 0) + 1
    outputs = entry(args, kwargs)
    settings.log_if_due(cache, resolved)
    return outputs


def wrap_in_hpu_graph(
    module: torch.nn.Module,
    asynchronous: bool = False,
    disable_tensor_cache: bool = False,
    dry_run: bool | None = None,
    max_graphs: int | None = None,
    free_inplace: bool = True,
    verbose: bool = False,
    log_frequency: int = 100,
) -> torch.nn.Module:
    """Run ``module``'s forward as HPU graphs, one per input key (``input_hash``: dtypes, shapes, views, autocast).

    The first call with a key captures (and executes) the forward on the caller's own inputs, which become the graph's
    inputs; later calls copy their tensors into those (so the first call's tensors then hold the latest values) and
    replay. The returned tensors are the graph's static outputs, overwritten by the next call with the same key. As on
    the SDK, calls are captured with gradients enabled too: later calls return the captured outputs with the
    capture's autograd history, so it is an inference API (use ``ModuleCacher`` to train). ``bypass_hpu_graphs=True``
    runs the original forward, and ``warmup_mode=True`` returns a captured graph's outputs without replaying it, as on
    the SDK. Once ``max_graphs`` graphs are cached, a call with a new key runs the original forward, uncaptured, as
    on the SDK: nothing is evicted. ``module.clear_cache()`` drops the graphs, ``module.clear_inputs()`` calls each
    graph's ``clear_inputs()``, ``module.log_statistics()`` prints :func:`log_stats` for this cache. The graphs are
    created at the first call: in eager mode that call raises ``RuntimeError``, as on the SDK.

    Args:
        module: The module whose ``forward`` is wrapped (in place).
        asynchronous: Whether Gaudi replays without waiting; the emulator's device runs in order, so it changes no
            result (it is printed in the statistics).
        disable_tensor_cache: On Gaudi, replays then read each call's own input tensors (the first call's are not
            overwritten) and the graph frees the outputs nobody asked for. Not reproduced: the emulator copies each
            call's tensors into the first call's, as without it, and keeps every tensor, so the returned values are
            the same but a kept first batch is overwritten (and in-place updates of an input inside the forward land
            in the first call's tensor), and device memory is higher. ``PT_HPUGRAPH_DISABLE_TENSOR_CACHE`` (``1`` or
            ``0``), read at each call, overrides it.
        dry_run: ``None`` (the 1.24 default): ``disable_tensor_cache``'s value. On Gaudi a dry run records the first
            call without executing it and then replays it once; the emulated capture executes it once, which gives
            the same outputs. Printed in the statistics.
        max_graphs: How many graphs to cache (later keys run uncaptured); no limit when ``None``.
        free_inplace: With ``disable_tensor_cache``, whether Gaudi frees the tensors of in-place updates of slices
            that nobody asked for (``mark_user_outputs``); memory only: the emulator keeps them, results are the same.
        verbose: Print :func:`log_stats` every ``log_frequency`` wrapped calls of the process (as the SDK counts).
        log_frequency: The number of calls between two printouts with ``verbose`` (0 or less: never).

    Raises:
        TypeError: When ``module`` is not an ``nn.Module``, or a flag is not a bool (``dry_run``: or ``None``), or
            ``log_frequency`` not an int.
        ValueError: When ``max_graphs`` is not a positive int or ``None``.
        RuntimeError: When ``module`` was compiled with ``torch.compile``.

    Example:
        >>> model = wrap_in_hpu_graph(model.eval())  # doctest: +SKIP
        >>> with torch.no_grad():  # doctest: +SKIP
        ...     out = model(batch)  # captured the first time, replayed after
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"wrap_in_hpu_graph(module=...) needs a torch.nn.Module, got {type(module).__name__}.")
    refuse_compiled(module, "module")
    settings = _WrapSettings.checked(
        "wrap_in_hpu_graph",
        asynchronous=asynchronous,
        disable_tensor_cache=disable_tensor_cache,
        dry_run=dry_run,
        max_graphs=max_graphs,
        free_inplace=free_inplace,
        verbose=verbose,
        log_frequency=log_frequency,
    )
    cache: dict[Hashable, _ForwardGraph] = {}
    original = module.forward

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        return _wrapped_forward(cache, original, args, kwargs, settings)

    def clear_inputs() -> None:
        for entry in cache.values():
            entry.graph.clear_inputs()

    def log_statistics() -> None:
        settings.log(cache, settings.resolved())

    # Plain attributes on the module, as the SDK sets them (nn.Module's typing knows only tensors and modules). Each
    # holds the cache, and so its graphs, for as long as the module keeps it.
    object.__setattr__(module, "forward", forward)
    object.__setattr__(module, "clear_inputs", clear_inputs)
    object.__setattr__(module, "clear_cache", cache.clear)
    object.__setattr__(module, "log_statistics", log_statistics)
    return module


def wrap_in_hpu_graph_func(
    func: Callable[..., Any],
    asynchronous: bool = False,
    disable_tensor_cache: bool = False,
    dry_run: bool | None = None,
    max_graphs: int | None = None,
    free_inplace: bool = True,
    verbose: bool = False,
    log_frequency: int = 100,
) -> Callable[..., Any]:
    """A function that runs ``func`` as HPU graphs, one per input key (``wrap_in_hpu_graph`` for a function).

    The same cache as :func:`wrap_in_hpu_graph`, returned as a new function (``func`` is not changed): the first call
    with a key captures and executes ``func`` on the caller's inputs, later ones copy their tensors into those and
    replay into the same static outputs, with gradients enabled or not (as on the SDK). The arguments mean what they
    mean for :func:`wrap_in_hpu_graph`; there is no ``log_statistics`` (``verbose=True`` prints the statistics).

    Args:
        func: The function to graph (uncompiled).
        asynchronous: As for :func:`wrap_in_hpu_graph`.
        disable_tensor_cache: As for :func:`wrap_in_hpu_graph`.
        dry_run: As for :func:`wrap_in_hpu_graph`.
        max_graphs: How many graphs to cache (later keys run uncaptured); no limit when ``None``.
        free_inplace: As for :func:`wrap_in_hpu_graph`.
        verbose: As for :func:`wrap_in_hpu_graph`.
        log_frequency: As for :func:`wrap_in_hpu_graph`.

    Raises:
        TypeError: When ``func`` is not callable, a flag is not a bool (``dry_run``: or ``None``), or
            ``log_frequency`` not an int.
        ValueError: When ``max_graphs`` is not a positive int or ``None``.
        RuntimeError: When ``func`` was compiled with ``torch.compile``.

    Example:
        >>> step = wrap_in_hpu_graph_func(lambda x: torch.relu(x) * 2)  # doctest: +SKIP
        >>> out = step(torch.randn(4, device="hpu"))  # doctest: +SKIP
    """
    if not callable(func):
        raise TypeError(f"wrap_in_hpu_graph_func(func=...) needs a callable, got {type(func).__name__}.")
    refuse_compiled(func, "func")
    settings = _WrapSettings.checked(
        "wrap_in_hpu_graph_func",
        asynchronous=asynchronous,
        disable_tensor_cache=disable_tensor_cache,
        dry_run=dry_run,
        max_graphs=max_graphs,
        free_inplace=free_inplace,
        verbose=verbose,
        log_frequency=log_frequency,
    )
    cache: dict[Hashable, _ForwardGraph] = {}

    def forward(*args: Any, **kwargs: Any) -> Any:
        return _wrapped_forward(cache, func, args, kwargs, settings)

    return forward
