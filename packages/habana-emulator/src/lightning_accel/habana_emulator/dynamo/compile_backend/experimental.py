"""Emulation of ``habana_frameworks.torch.dynamo.compile_backend.experimental``: compiled autograd for ``hpu_backend``.

The contract (gaudi-pytorch-bridge 1.19.0, ``.../compile_backend/experimental.py``): ``enable_compiled_autograd(**kw)``
makes every later backward pass of the process run through torch's compiled autograd, its graphs compiled with
``torch.compile(graph, backend="hpu_backend", options={"inference": False}, **kw)``; it resets dynamo, sets
``torch._dynamo.config.optimize_ddp = "python_reducer"`` and the autograd fallback mode to ``"nothing"``, and logs a
warning that it did so. It is process-wide and has no counterpart to turn it off. The SDK calls it when its compile
backend loads if ``PT_HPU_ENABLE_COMPILED_AUTOGRAD`` is set (``compile_backend/__init__.py:20-23``).

The SDK's torch (2.5) takes the compiler alone (``set_autograd_compiler(compiler)``), and its compiled autograd treats
the graph's tensors as dynamic; torch 2.13 takes that choice as a second argument, given here as ``True``, with the flag
torch's own ``compiled_autograd._enable`` sets alongside; and torch 2.13's ``torch._dynamo.reset()`` turns compiled
autograd off, so the reset comes first here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["enable_compiled_autograd", "get_compile_backend_logger", "logger"]


def get_compile_backend_logger() -> logging.Logger:
    """The compile backend's logger (``habana_frameworks.torch.dynamo.debug_utils.logger`` on the SDK)."""
    return logging.getLogger("habana_frameworks.torch.dynamo.compile_backend")


logger = get_compile_backend_logger()


def enable_compiled_autograd(**kwargs: Any) -> None:
    """Run every later backward pass through compiled autograd, compiled with ``hpu_backend`` (process-wide).

    Call it before any ``torch.compile``. ``kwargs`` go to the ``torch.compile`` of each backward graph.

    Example:
        >>> from habana_frameworks.torch.dynamo.compile_backend.experimental import enable_compiled_autograd
        >>> enable_compiled_autograd()  # doctest: +SKIP
    """
    from torch._dynamo import compiled_autograd

    logger.warning("Enabling CompiledAutograd for hpu_backend with torch.compile")

    def compiler_fn(graph_module: torch.fx.GraphModule) -> Callable[..., Any]:
        return torch.compile(graph_module, backend="hpu_backend", options={"inference": False}, **kwargs)

    # Reset before setting the compiler, where the SDK resets after: torch 2.13's dynamo reset also resets compiled
    # autograd (torch 2.5's did not), and would undo what this function is for.
    torch._dynamo.reset()
    torch._C._dynamo.compiled_autograd.set_autograd_compiler(
        functools.partial(compiled_autograd.AutogradCompilerInstance, compiler_fn), True
    )
    compiled_autograd.compiled_autograd_enabled = True
    torch._dynamo.config.optimize_ddp = "python_reducer"
    torch._C._set_autograd_fallback_mode("nothing")
