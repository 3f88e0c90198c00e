"""The emulated ``make_graphed_callables``: forward and backward HPU graphs behind an autograd function.

``hpu.graphs`` exports :func:`make_graphed_callables` under the SDK's name (gaudi-pytorch-bridge 1.19.0
``python_packages/habana_frameworks/torch/hpu/graphs.py:187-476``, the same at bcc5172 but for its lazy-mode check:
its ``HPUGraph()`` raises in eager mode); :func:`graph_autograd` is the capture of one callable, which the emulated
``ModuleCacher`` also builds its graphs with (``_graph_cache``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ._hpu_graph import HPUGraph, graph, refuse_compiled, refuse_eager_mode

__all__ = ["graph_autograd", "make_graphed_callables"]


def graph_autograd(
    func: Callable[..., Any],
    sample_args: tuple[torch.Tensor, ...],
    params: tuple[torch.Tensor, ...],
    warmups: int,
    allow_unused_input: bool,
    first_call_is_capture: bool = False,
    dry_run: bool = False,
) -> Callable[..., Any]:
    """Capture ``func``'s forward and backward; return a function of the user tensors that replays them.

    ``params`` are the tensors ``func`` uses besides its arguments (a module's
    parameters); their gradients come from the backward graph. With ``first_call_is_capture``, ``sample_args`` hold
    the first call's own inputs, so the first call returns what the capture computed instead of running the forward
    again (a second run would draw new random numbers, e.g. dropout masks, and do the work twice).

    ``dry_run``: on Gaudi the forward capture then records without executing, so its in-place updates (a BatchNorm's
    running statistics) happen at the replays only; the emulated capture executes, so the sample arguments and the
    module's parameters and buffers get their values back after it.
    """
    surface = sample_args + params
    for _ in range(warmups):
        warm = tuple(o for o in _as_tuple(func(*sample_args)) if isinstance(o, torch.Tensor) and o.requires_grad)
        warm_inputs = tuple(i for i in surface if i.requires_grad)
        if warm and warm_inputs:
            torch.autograd.grad(
                warm, warm_inputs, grad_outputs=[torch.zeros_like(o) for o in warm], allow_unused=allow_unused_input
            )
    forward_graph = HPUGraph()
    kept = _owned_state(func, sample_args) if dry_run else []
    with graph(forward_graph):
        raw = func(*sample_args)
    # What the forward capture changed in place (its version moved), put back once the backward is captured: the
    # autograd graph of the capture checks the versions of what it saved.
    changed = [(tensor, before) for tensor, before, version in kept if tensor._version != version]
    static_outputs = _as_tuple(raw)
    if not all(isinstance(o, torch.Tensor) for o in static_outputs):
        raise TypeError(
            "make_graphed_callables needs callables that return a tensor or a tuple of tensors; got "
            f"{[type(o).__name__ for o in static_outputs]}. Return tensors only (or use ModuleCacher)."
        )
    static_grad_outputs = tuple(torch.zeros_like(o) if o.requires_grad else None for o in static_outputs)
    needs_grad = tuple(i for i in surface if i.requires_grad)
    backward_graph = HPUGraph()
    grads: tuple[torch.Tensor | None, ...] = ()
    differentiable = tuple(o for o in static_outputs if o.requires_grad)
    if differentiable and needs_grad:
        with graph(backward_graph):
            grads = torch.autograd.grad(
                differentiable,
                needs_grad,
                grad_outputs=tuple(g for g in static_grad_outputs if g is not None),
                allow_unused=allow_unused_input,
                materialize_grads=allow_unused_input,
            )
    with torch.no_grad():
        for tensor, before in changed:
            tensor.copy_(before)
    grad_iter = iter(grads)
    static_grad_inputs = tuple(next(grad_iter) if i.requires_grad else None for i in surface)
    user_count = len(sample_args)
    pending_capture = [first_call_is_capture]

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            if pending_capture[0]:
                pending_capture[0] = False
                return tuple(o.detach() for o in static_outputs)
            for static, new in zip(sample_args, inputs[:user_count], strict=False):
                if static.data_ptr() != new.data_ptr():
                    static.copy_(new)
            forward_graph.replay()
            return tuple(o.detach() for o in static_outputs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
            for static, new in zip(static_grad_outputs, grad_outputs, strict=False):
                if static is not None and new is not None:
                    static.copy_(new)
            if backward_graph.captured:
                backward_graph.replay()
            return tuple(g.detach() if g is not None else None for g in static_grad_inputs)

    def graphed(*user_args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs: tuple[torch.Tensor, ...] = Graphed.apply(*(user_args + params))
        return outputs

    def run(*user_args: torch.Tensor) -> Any:
        out = graphed(*user_args)
        return out[0] if isinstance(raw, torch.Tensor) else out

    return run


def _owned_state(func: Any, sample_args: tuple[torch.Tensor, ...]) -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """The tensors a captured forward may update in place, with copies of their values and their versions now."""
    owner = getattr(func, "__self__", func)  # a module's bound forward
    tensors = list(sample_args)
    if isinstance(owner, torch.nn.Module):
        tensors += [*owner.buffers(), *owner.parameters()]
    return [(t, t.detach().clone(), t._version) for t in tensors]


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


def _check_module(module: torch.nn.Module) -> None:
    refuse_compiled(module, "callables")
    # The SDK's assertions, with its messages (graphs.py:240-248), then how to fix it. In lazy mode the SDK hooks every
    # module assigned as a child after it loads (core/torch_overwrites.py:162-182, :259-282), so on Gaudi a child
    # module fails here too; the emulator does not add those hooks (docs/emulator.md, "HPU graphs").
    if module._backward_hooks or module._forward_hooks or module._forward_pre_hooks:
        raise AssertionError(
            "Modules must not have hooks registered at the time they are passed. However, registering hooks on "
            f"modules after passing them through make_graphed_callables is allowed. (callables={type(module).__name__} "
            "has hooks: register them after make_graphed_callables, or graph a module without hooks.)"
        )
    if any(b.requires_grad for b in module.buffers()):
        raise AssertionError(
            "In any :class:`~torch.nn.Module` passed to :func:`~make_graphed_callables`, only parameters may be "
            f"trainable. All buffers must have ``requires_grad=False``. (callables={type(module).__name__} has a "
            "buffer that requires grad: make it an nn.Parameter or set requires_grad=False on it.)"
        )


def _check_sample_args(args: tuple[Any, ...]) -> None:
    if not all(isinstance(a, torch.Tensor) for a in args):
        # The SDK's assertion and message (graphs.py:249-252).
        raise AssertionError(
            "In the beta API, sample_args for each callable must be a tuple of Tensors. Other types and keywordargs "
            f"are not allowed. (sample_args holds {[type(a).__name__ for a in args]}: pass keyword and non-tensor "
            "arguments through a wrapper, or use ModuleCacher.)"
        )


def make_graphed_callables(
    callables: Any,
    sample_args: Any,
    warmups: int = 0,
    allow_unused_input: bool = False,
    asynchronous: bool = False,
    disable_tensor_cache: bool = False,
    dry_run: bool = False,
) -> Any:
    """Graph the forward and backward of a module or function (or a tuple of them).

    A graphed module runs its graphs while its ``training`` flag is what it was at capture, and its original forward
    otherwise. Outputs are the graph's static tensors: they are overwritten by the next call.

    Args:
        callables: A module or function, or a tuple of them in the order they run.
        sample_args: A tuple of tensors for one callable, or a tuple of such tuples.
        warmups: Eager forward and backward runs before the capture.
        allow_unused_input: Allow inputs that do not influence the outputs (their gradient is zero).
        asynchronous: Whether Gaudi replays without waiting; the emulator's device runs in order (no result changes).
        disable_tensor_cache: On Gaudi the graphs then read the caller's tensors in place instead of copies and the
            captures are dry runs; the emulator copies (same results, more memory) and does the dry run below.
        dry_run: On Gaudi the captures record without executing, so the forward's in-place updates (a BatchNorm's
            running statistics, the sample arguments) happen at the replays only: the emulated capture executes
            and then puts those tensors back, so they match.

    Raises:
        AssertionError: As the SDK's assertions: when a module has hooks or a trainable buffer, or a sample argument
            is not a tensor.
        RuntimeError: In eager mode, when the graphs are created (as on the SDK, after the assertions).
        TypeError: When a callable returns something else than tensors, or a flag is not a bool.
    """
    single = not isinstance(callables, tuple)
    items = (callables,) if single else callables
    samples = (sample_args,) if single else sample_args
    results: list[Any] = []
    for name, value in (
        ("asynchronous", asynchronous),
        ("disable_tensor_cache", disable_tensor_cache),
        ("dry_run", dry_run),
    ):
        if not isinstance(value, bool):
            raise TypeError(f"make_graphed_callables({name}={value!r}) is not accepted. Accepted: True or False.")
    # The SDK checks every callable before it captures any (graphs.py:238-252), then creates the graphs, which refuse
    # eager mode before any warm-up runs.
    for func, args in zip(items, samples, strict=False):
        if isinstance(func, torch.nn.Module):
            _check_module(func)
        _check_sample_args(tuple(args))
    refuse_eager_mode("HPUGraph (make_graphed_callables captures each callable into two)")
    dry = dry_run or disable_tensor_cache  # as the SDK's captures: dry_run=True if disable_tensor_cache else dry_run
    for func, args in zip(items, samples, strict=False):
        args = tuple(args)
        params: tuple[torch.Tensor, ...] = ()
        if isinstance(func, torch.nn.Module):
            params = tuple(func.parameters())
            training = func.training
            original = func.forward
            graphed = graph_autograd(original, args, params, warmups, allow_unused_input, dry_run=dry)

            def forward(
                *user_args: Any, _m: Any = func, _g: Any = graphed, _o: Any = original, _t: bool = training
            ) -> Any:
                # As on the SDK: the graphs hold one training mode; the other mode runs the original forward.
                return _g(*user_args) if _m.training == _t else _o(*user_args)

            func.forward = forward
            results.append(func)
        else:
            refuse_compiled(func, "callables")
            graphed = graph_autograd(func, args, params, warmups, allow_unused_input, dry_run=dry)
            results.append(functools.wraps(func)(graphed))
    return results[0] if single else tuple(results)
