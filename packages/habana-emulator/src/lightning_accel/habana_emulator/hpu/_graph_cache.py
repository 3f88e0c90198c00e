"""Graph caches keyed by input signature: the emulated ``ModuleCacher``, ``wrap_in_hpu_graph``, its function form.

Neither evicts, as on the SDK (gaudi-pytorch-bridge 1.19.0, ``habana_frameworks/torch/hpu/graphs.py``): once
``max_graphs`` graphs are cached, a call with a new signature runs the original forward uncaptured
(``wrapped_hpugraph_forward``: ``if max_graphs is not None and len(cache) == max_graphs: return orig_fwd(...)``;
``ModuleCacher.forward`` inserts only while ``len(self.model_dict) < self.max_graphs`` and otherwise counts an uncached
hit). The graphs cached first stay until ``module.clear_cache()`` (``wrap_in_hpu_graph`` only; ``ModuleCacher`` and
``wrap_in_hpu_graph_func`` have no way to drop them).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ._graphed_callables import graph_autograd
from ._hpu_graph import HPUGraph, graph, refuse_compiled

__all__ = ["ModuleCacher", "signature", "wrap_in_hpu_graph", "wrap_in_hpu_graph_func"]


def signature(leaves: list[Any], spec: Any) -> Hashable:
    """The cache key of a call: its structure, each tensor's shape, dtype, device and grad flag, other values."""
    parts: list[Hashable] = [str(spec)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            parts.append((tuple(leaf.shape), leaf.dtype, str(leaf.device), leaf.requires_grad))
        else:
            try:
                hash(leaf)
                parts.append(leaf)
            except TypeError:
                parts.append(repr(leaf))
    return tuple(parts)


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


def _static_copy(tensor: torch.Tensor) -> torch.Tensor:
    static = tensor.detach().clone()
    return static.requires_grad_(tensor.requires_grad)


class _GraphedCall:
    """One input signature of a ModuleCacher: the forward and backward graphs of the module on such inputs."""

    def __init__(
        self,
        forward: Callable[..., Any],
        leaves: list[Any],
        spec: Any,
        params: tuple[torch.Tensor, ...],
        allow_unused_input: bool,
    ) -> None:
        self.positions, tensors = _split(leaves)
        constants = list(leaves)
        self.out_spec: Any = None
        self.out_constants: list[Any] = []

        def tensors_only(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            full = list(constants)
            for position, tensor in zip(self.positions, inputs, strict=False):
                full[position] = tensor
            args, kwargs = tree_unflatten(full, spec)
            out_leaves, self.out_spec = tree_flatten(forward(*args, **kwargs))
            self.out_constants = out_leaves
            return tuple(leaf for leaf in out_leaves if isinstance(leaf, torch.Tensor))

        static = tuple(_static_copy(t) for t in tensors)
        self.graphed = graph_autograd(tensors_only, static, params, 0, allow_unused_input, first_call_is_capture=True)

    def __call__(self, leaves: list[Any]) -> Any:
        _, tensors = _split(leaves)
        filled = iter(self.graphed(*tensors))
        out_leaves = [next(filled) if isinstance(leaf, torch.Tensor) else leaf for leaf in self.out_constants]
        return tree_unflatten(out_leaves, self.out_spec)


class ModuleCacher:
    """Cache one HPU graph per input signature of a module's training forward, for the first ``max_graphs`` signatures.

    Calls in training mode with gradients enabled (and lazy mode, as on the SDK) run graphs: a new signature is
    captured (forward and backward, executing the work) while fewer than ``max_graphs`` graphs are cached, a known one
    replayed. Once ``max_graphs`` graphs are cached, a new signature runs the original forward, uncaptured, and is
    counted in ``uncached_train_hits``, as on the SDK: nothing is evicted. Other calls (evaluation,
    ``torch.no_grad``) run the original forward too.

    Args:
        max_graphs: How many graphs to cache.

    Example:
        >>> from lightning_accel.habana.sdk import htcore  # doctest: +SKIP
        >>> model = htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)  # doctest: +SKIP
    """

    def __init__(self, max_graphs: int = 10) -> None:
        _check_max_graphs(max_graphs, "ModuleCacher", allow_none=False)
        self.max_graphs = max_graphs
        # The graphs cached, by input signature (the SDK's attribute of this name).
        self.model_dict: dict[Hashable, _GraphedCall] = {}
        self.cached_hits_dict: dict[Hashable, int] = {}
        self.uncached_train_hits = 0
        self.uncached_eval_hits = 0
        self.model: torch.nn.Module | None = None
        self._forward: Callable[..., Any] | None = None
        self.allow_unused_input = False

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

        Raises:
            TypeError: When ``model`` is not an ``nn.Module``.
            RuntimeError: When ``model`` was compiled with ``torch.compile``.
        """
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"ModuleCacher(...)(model=...) needs a torch.nn.Module, got {type(model).__name__}.")
        refuse_compiled(model, "model")
        if not inplace:
            model = copy.copy(model)
        # The SDK's default is strict; it allows unused inputs for the graphs it builds per signature.
        self.allow_unused_input = True
        self._forward = model.forward
        self.model = model
        # Plain attributes on the module, as the SDK sets them (nn.Module's typing knows only tensors and modules).
        object.__setattr__(model, "orig_forward", self._forward)
        object.__setattr__(model, "forward", self.forward)
        return model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Replay (or capture) the graph of this input signature, or run the original forward."""
        assert self.model is not None and self._forward is not None
        from ..core import is_lazy  # the core module imports this package

        if self.model.training and torch.is_grad_enabled() and is_lazy():
            leaves, spec = tree_flatten((args, kwargs))
            key = signature(leaves, spec)
            entry = self.model_dict.get(key)
            if entry is None and len(self.model_dict) < self.max_graphs:
                params = tuple(self.model.parameters())
                entry = self.model_dict[key] = _GraphedCall(
                    self._forward, leaves, spec, params, self.allow_unused_input
                )
            if entry is not None:
                self.cached_hits_dict[key] = self.cached_hits_dict.get(key, 0) + 1
                return entry(leaves)
        if self.model.training:
            self.uncached_train_hits += 1
        else:
            self.uncached_eval_hits += 1
        return self._forward(*args, **kwargs)

    def log_stats(self) -> str:
        """The cache statistics, as the SDK prints them."""
        cached = sum(self.cached_hits_dict.values())
        text = (
            f"HPU Graph Statistics\n  Max graphs: {self.max_graphs}\n  No. of HPUGraphs cached: {len(self.model_dict)}"
            f"\n  Total cached hits: {cached}"
            f"\n  Uncached train hits: {self.uncached_train_hits}\n  Uncached eval hits: {self.uncached_eval_hits}"
            f"\n  Total forwards executed: {cached + self.uncached_train_hits + self.uncached_eval_hits}"
        )
        print(text)
        return text


class _ForwardGraph:
    def __init__(self, forward: Callable[..., Any], leaves: list[Any], spec: Any) -> None:
        positions, tensors = _split(leaves)
        self.static = [t.detach().clone() for t in tensors]
        full = list(leaves)
        for position, static in zip(positions, self.static, strict=False):
            full[position] = static
        args, kwargs = tree_unflatten(full, spec)
        self.graph = HPUGraph()
        with graph(self.graph):
            self.outputs = forward(*args, **kwargs)

    def __call__(self, leaves: list[Any]) -> Any:
        _, tensors = _split(leaves)
        for static, new in zip(self.static, tensors, strict=False):
            static.copy_(new)
        self.graph.replay()
        return self.outputs


def _graphed_forward(
    original: Callable[..., Any],
    cache: dict[Hashable, _ForwardGraph],
    max_graphs: int | None,
    parameters: Callable[[], Iterable[torch.Tensor]],
) -> Callable[..., Any]:
    """``original`` behind a cache of forward graphs, one per input signature (the body of both wrap functions)."""
    # Signatures whose capture computed with tensors that require grad: a forward-only graph cannot be differentiated.
    differentiable: set[Hashable] = set()

    def forward(*args: Any, **kwargs: Any) -> Any:
        # The SDK's keyword arguments for the graph, never passed on (bridge 1.19.0 hpu/graphs.py:583-592).
        warmup_mode = kwargs.pop("warmup_mode", False)
        if kwargs.pop("bypass_hpu_graphs", False):
            return original(*args, **kwargs)
        # The tensors to keep with disable_tensor_cache: the emulated graphs keep all of their tensors.
        kwargs.pop("cache_tensors_list", None)
        leaves, spec = tree_flatten((args, kwargs))
        grad = torch.is_grad_enabled()
        if grad and (
            any(p.requires_grad for p in parameters())
            or any(isinstance(leaf, torch.Tensor) and leaf.requires_grad for leaf in leaves)
        ):
            return original(*args, **kwargs)
        key = signature(leaves, spec)
        if grad and key in differentiable:
            return original(*args, **kwargs)
        entry = cache.get(key)
        if entry is not None:
            if warmup_mode:
                # As the SDK: a warm-up call marks the step and returns the graph's outputs without replaying it.
                from ..core import mark_step  # the core imports this package

                mark_step()
                return entry.outputs
            return entry(leaves)
        if max_graphs is not None and len(cache) == max_graphs:
            return original(*args, **kwargs)
        entry = _ForwardGraph(original, leaves, spec)
        if grad and any(t.requires_grad for t in tree_flatten(entry.outputs)[0] if isinstance(t, torch.Tensor)):
            differentiable.add(key)
        else:
            cache[key] = entry
        return entry.outputs

    return forward


def wrap_in_hpu_graph(
    module: torch.nn.Module,
    asynchronous: bool = False,
    disable_tensor_cache: bool = False,
    dry_run: bool = False,
    max_graphs: int | None = None,
) -> torch.nn.Module:
    """Run ``module``'s inference forward as HPU graphs, one per input signature.

    The first call with a signature captures (and executes) the forward; later calls copy their tensors into the
    captured inputs and replay. The returned tensors are the graph's static outputs, overwritten by the next call
    with the same signature. Calls that need autograd (gradients enabled and a parameter or input requiring grad)
    run the original forward, since a forward-only graph cannot be differentiated; ``bypass_hpu_graphs=True`` does
    too, and ``warmup_mode=True`` returns a captured graph's outputs without replaying it, as on the SDK. Once
    ``max_graphs`` graphs are cached, a call with a new signature runs the original forward, uncaptured, as on the
    SDK: nothing is evicted. ``module.clear_cache()`` drops the graphs, ``module.clear_inputs()`` calls each graph's
    ``clear_inputs()``.

    Args:
        module: The module whose ``forward`` is wrapped (in place).
        asynchronous: Accepted for compatibility with the SDK.
        disable_tensor_cache: Accepted for compatibility with the SDK (the emulator keeps captured tensors).
        dry_run: Accepted for compatibility with the SDK.
        max_graphs: How many graphs to cache (later signatures run uncaptured); no limit when ``None``.

    Raises:
        TypeError: When ``module`` is not an ``nn.Module``.
        RuntimeError: When ``module`` was compiled with ``torch.compile``.

    Example:
        >>> model = wrap_in_hpu_graph(model.eval())  # doctest: +SKIP
        >>> with torch.no_grad():  # doctest: +SKIP
        ...     out = model(batch)  # captured the first time, replayed after
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"wrap_in_hpu_graph(module=...) needs a torch.nn.Module, got {type(module).__name__}.")
    refuse_compiled(module, "module")
    _check_max_graphs(max_graphs, "wrap_in_hpu_graph", allow_none=True)
    cache: dict[Hashable, _ForwardGraph] = {}
    original = module.forward
    forward = functools.wraps(original)(_graphed_forward(original, cache, max_graphs, module.parameters))

    def clear_inputs() -> None:
        for entry in cache.values():
            entry.graph.clear_inputs()

    object.__setattr__(module, "forward", forward)
    object.__setattr__(module, "clear_inputs", clear_inputs)
    object.__setattr__(module, "clear_cache", cache.clear)
    return module


def wrap_in_hpu_graph_func(
    func: Callable[..., Any],
    asynchronous: bool = False,
    disable_tensor_cache: bool = False,
    dry_run: bool = False,
    max_graphs: int | None = None,
) -> Callable[..., Any]:
    """A function that runs ``func`` as HPU graphs, one per input signature (``wrap_in_hpu_graph`` for a function).

    The same cache as :func:`wrap_in_hpu_graph`, returned as a new function (``func`` is not changed): the first call
    with a signature captures and executes ``func``, later ones replay into the same static outputs. Calls with
    gradients enabled and an input requiring grad run ``func`` itself, and so do later such calls with a signature
    whose capture used tensors requiring grad (parameters ``func`` reaches by itself).

    Args:
        func: The function to graph (uncompiled).
        asynchronous: Accepted for compatibility with the SDK.
        disable_tensor_cache: Accepted for compatibility with the SDK (the emulator keeps captured tensors).
        dry_run: Accepted for compatibility with the SDK.
        max_graphs: How many graphs to cache (later signatures run uncaptured); no limit when ``None``.

    Raises:
        TypeError: When ``func`` is not callable.
        RuntimeError: When ``func`` was compiled with ``torch.compile``.

    Example:
        >>> step = wrap_in_hpu_graph_func(lambda x: torch.relu(x) * 2)  # doctest: +SKIP
        >>> out = step(torch.randn(4, device="hpu"))  # doctest: +SKIP
    """
    if not callable(func):
        raise TypeError(f"wrap_in_hpu_graph_func(func=...) needs a callable, got {type(func).__name__}.")
    refuse_compiled(func, "func")
    _check_max_graphs(max_graphs, "wrap_in_hpu_graph_func", allow_none=True)
    return _graphed_forward(func, {}, max_graphs, lambda: ())
