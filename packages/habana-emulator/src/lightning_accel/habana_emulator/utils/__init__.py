"""Emulation of ``habana_frameworks.torch.utils``: its submodules and ``split_tensor_batch``.

``split_tensor_batch`` is plain Python in the SDK (``utils/__init__.py`` at bcc5172) and runs the same here: in
inference (autograd off) it calls the decorated function once per slice of the batch and joins the results.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import experimental, internal, library_loader

__all__ = ["experimental", "internal", "library_loader", "split_tensor_batch"]


def _is_tensor_chunks(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and torch.is_tensor(value[0])


def _check_indices(name: str, indices: Sequence[int], limit: int, what: str) -> None:
    bad = [i for i in indices if not isinstance(i, int) or isinstance(i, bool) or i < 0 or i >= limit]
    if bad:
        raise IndexError(
            f"{name} contains {', '.join(map(repr, bad))}, but the call has {limit} {what}: give indices from 0 to "
            f"{limit - 1}."
        )


def split_tensor_batch(
    _func: Callable[..., Any] | None = None,
    *,
    num_splits: int = 1,
    split_index_list: Sequence[int] | None = None,
    cat_out_index_list: Sequence[int] | None = None,
) -> Any:
    """Decorator: in inference, run the function on ``num_splits`` slices of the batch and concatenate the outputs.

    The positional arguments named by ``split_index_list`` are split along dimension 0 with ``torch.tensor_split``
    (an argument that is a list or tuple of tensors is taken as already split: one element per call). The function
    runs once per slice; the outputs named by ``cat_out_index_list`` are concatenated along dimension 0 (every output
    when the list is empty or ``None``), the others come back as lists with one element per slice. With autograd on,
    ``num_splits <= 1`` or no index to split, the function runs once, unchanged.

    As the SDK's: used with arguments (``@split_tensor_batch(num_splits=2, split_index_list=[0])``) it decorates a
    method, so index 0 is the first argument after ``self``.

    Raises:
        IndexError: When an index of ``split_index_list`` or ``cat_out_index_list`` is outside the call's arguments
            or the function's outputs.
        TypeError: When an argument to split is neither a tensor nor a non-empty list or tuple of tensors.
        ValueError: When the arguments to split give different numbers of slices.
    """
    split_indices = sorted(split_index_list or [])
    cat_indices = list(cat_out_index_list or [])
    # The SDK's offset: with arguments, the decorated function is a method and its self comes first.
    offset = 1 if _func is None else 0

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if num_splits <= 1 or torch.is_grad_enabled() or not split_indices:
                return func(*args, **kwargs)
            positions = [i + offset for i in split_indices]
            _check_indices(
                "split_index_list", [i - offset for i in positions], len(args) - offset, "positional arguments"
            )
            slices = []
            for position in positions:
                value = args[position]
                if torch.is_tensor(value):
                    slices.append(torch.tensor_split(value, num_splits))
                elif _is_tensor_chunks(value):
                    slices.append(value)
                else:
                    raise TypeError(
                        f"split_tensor_batch: the argument at index {position - offset} is neither a tensor nor a "
                        f"non-empty list or tuple of tensors (got {type(value).__name__}); name only tensor "
                        "arguments in split_index_list."
                    )
            counts = [len(s) for s in slices]
            if len(set(counts)) != 1:
                raise ValueError(
                    f"split_tensor_batch: the arguments to split give different numbers of slices {counts}; split "
                    "tensors of the same batch size, or pass lists of the same length."
                )
            outputs = []
            call_args = list(args)
            for n in range(counts[0]):
                for position, pieces in zip(positions, slices, strict=True):
                    call_args[position] = pieces[n]
                output = func(*call_args, **kwargs)
                outputs.append(output if isinstance(output, (list, tuple)) else (output,))
            count = len(outputs[0])
            _check_indices("cat_out_index_list", cat_indices, count, "outputs")
            joined = cat_indices or list(range(count))
            merged: list[Any] = []
            for i in range(count):
                chunks = [out[i] for out in outputs]
                if i not in joined:
                    merged.append(chunks)
                elif all(chunk is None for chunk in chunks):
                    merged.append(None)
                elif all(isinstance(chunk, list) for chunk in chunks):
                    merged.append([torch.cat(parts, dim=0) for parts in zip(*chunks, strict=False)])
                elif all(torch.is_tensor(chunk) for chunk in chunks):
                    merged.append(torch.cat(chunks, dim=0))
                else:
                    merged.append(chunks)
            return tuple(merged) if len(merged) > 1 else merged[0]

        return wrapper

    return decorator if _func is None else decorator(_func)
