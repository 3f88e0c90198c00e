"""Model-parallel annotations: ``BeginBlock``, ``Block`` and ``BlockFunction`` assign layers to IPUs.

Outside an executor (plain PyTorch on the host) they do nothing, as in poptorch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from .errors import Error
from .tracing import current_context

__all__ = ["BeginBlock", "Block", "BlockFunction", "BlockId", "LegacyBeginBlockFn", "removeBlocks"]

BlockId = str

_F = TypeVar("_F", bound="Callable[..., Any]")
_M = TypeVar("_M")


class _BlockHook:
    """Forward pre-hook that starts a block whenever its module is called."""

    def __init__(self, user_id: str | None, ipu_id: int | None) -> None:
        self.user_id = user_id
        self.ipu_id = ipu_id

    def __call__(self, module: torch.nn.Module, inputs: Any) -> None:
        context = current_context()
        if context is not None:
            context.start_block(self.user_id, self.ipu_id)


class LegacyBeginBlockFn:
    """``BeginBlock`` applied to a plain callable: calling it starts the block, then calls the function.

    Example:
        >>> double = LegacyBeginBlockFn(lambda x: 2 * x, None, 1)
        >>> double(3)
        6
    """

    def __init__(
        self, layer_to_call: Callable[..., Any], user_id: str | None = None, ipu_id: int | None = None
    ) -> None:
        self._fn = layer_to_call
        self._hook = _BlockHook(user_id, ipu_id)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        context = current_context()
        if context is not None:
            context.start_block(self._hook.user_id, self._hook.ipu_id)
        return self._fn(*args, **kwargs)


def BeginBlock(layer_to_call: _M, user_id: str | None = None, ipu_id: int | None = None) -> _M:
    """Start a new block (on IPU ``ipu_id``) each time ``layer_to_call`` runs; returns the layer.

    Everything executed afterwards belongs to that block until the next block starts.

    Example:
        >>> layer = BeginBlock(torch.nn.Linear(5, 10), ipu_id=1)
        >>> isinstance(layer, torch.nn.Linear)
        True
    """
    if not isinstance(layer_to_call, torch.nn.Module):
        if callable(layer_to_call):
            return LegacyBeginBlockFn(layer_to_call, user_id, ipu_id)  # type: ignore[return-value]
        raise Error("module is not an instance of torch.nn.Module or function.")  # ops.py:720-727
    for hook in layer_to_call._forward_pre_hooks.values():
        if isinstance(hook, _BlockHook):
            raise Error("module has already been assigned to a block.")  # ops.py:729-734
    layer_to_call.register_forward_pre_hook(_BlockHook(user_id, ipu_id))
    return layer_to_call


class Block:
    """Context manager: the enclosed code runs in a block on IPU ``ipu_id``.

    Example:
        >>> with Block(ipu_id=0):
        ...     y = torch.ones(2) * 2
        >>> y.tolist()
        [2.0, 2.0]
    """

    def __init__(self, user_id: str | None = None, ipu_id: int | None = None) -> None:
        self.user_id = user_id
        self.ipu_id = ipu_id

    @staticmethod
    def useAutoId() -> None:
        """Number the blocks without ``user_id`` from ``"0"`` again (call it at the start of ``forward``)."""
        context = current_context()
        if context is not None:
            context.reset_auto_id()

    @staticmethod
    def start(user_id: str | None = None, ipu_id: int | None = None) -> None:
        """Start a block without a ``with`` statement (it lasts until the next one starts)."""
        context = current_context()
        if context is not None:
            context.start_block(user_id, ipu_id)

    def __enter__(self) -> Block:
        Block.start(self.user_id, self.ipu_id)
        return self

    def __exit__(self, *exc: object) -> None:
        # poptorch ends the block here (ops.py:625-626, _end_ipu_block): what follows is in no block until the next.
        context = current_context()
        if context is not None:
            context.end_block()


def BlockFunction(user_id: str | None = None, ipu_id: int | None = None) -> Callable[[_F], _F]:
    """Decorator: the function body runs in a block on IPU ``ipu_id``.

    Example:
        >>> @BlockFunction(ipu_id=1)
        ... def head(x):
        ...     return x + 1
        >>> head(1)
        2
    """

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Block(user_id, ipu_id):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def removeBlocks(module: torch.nn.Module) -> None:
    """Remove the ``BeginBlock`` annotations from ``module`` and its submodules.

    Example:
        >>> layer = BeginBlock(torch.nn.Linear(2, 2), ipu_id=1)
        >>> removeBlocks(layer)
        >>> len(layer._forward_pre_hooks)
        0
    """
    assert isinstance(module, torch.nn.Module)
    for sub in module.modules():
        for key in [key for key, hook in sub._forward_pre_hooks.items() if isinstance(hook, _BlockHook)]:
            del sub._forward_pre_hooks[key]
