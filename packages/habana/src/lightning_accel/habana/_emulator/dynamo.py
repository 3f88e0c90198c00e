"""Emulation of the SDK's ``torch.compile`` backends (``habana_frameworks.torch.dynamo.compile_backend``).

Importing the SDK registers ``hpu_backend`` (the general backend), ``aot_hpu_training_backend`` and
``aot_hpu_inference_backend`` (the AOT-autograd backends of earlier SDKs) with ``torch.compile``. On the emulator
they compile the captured graphs with TorchInductor for the backing device (C++/OpenMP kernels on the CPU, Triton on
CUDA): a real compilation, with Inductor's numerics rather than Gaudi's graph compiler's.

Compiled code cannot run inside an HPU graph capture and an HPU graph cannot be built inside compiled code, as on
Gaudi: both raise a ``RuntimeError`` that says to choose one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .hpu import graphs

__all__ = ["BACKENDS", "aot_hpu_inference_backend", "aot_hpu_training_backend", "hpu_backend", "register_backends"]


def _refuse_during_capture() -> None:
    if graphs.is_current_stream_capturing():
        raise RuntimeError(
            "A torch.compile-d function ran inside an HPU graph capture. HPU graphs cannot be combined with "
            "torch.compile (the SDK does not support it): capture an uncompiled model, or compile without HPU graphs."
        )


def _inductor(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    from torch._inductor.compile_fx import compile_fx

    _refuse_during_capture()
    compiled: Callable[..., Any] = compile_fx(gm, example_inputs)  # type: ignore[assignment]

    def run(*args: Any) -> Any:
        # Compiled kernels bypass the operator recording of a capture: replaying would silently skip them.
        _refuse_during_capture()
        return compiled(*args)

    return run


def hpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
    """The general HPU backend: training and inference graphs (AOT autograd, then Inductor on the backing device)."""
    return _inductor(gm, example_inputs)


def aot_hpu_training_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
    """The AOT-autograd training backend of earlier SDKs: forward and backward graphs are compiled."""
    return _inductor(gm, example_inputs)


def aot_hpu_inference_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
    """The inference backend: forward graphs only.

    Raises:
        RuntimeError: When the graph needs gradients (gradients enabled and an input or parameter requiring grad).
    """
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        raise RuntimeError(
            "backend='aot_hpu_inference_backend' compiles inference graphs, but this graph needs gradients (an input "
            "or parameter requires grad and gradients are enabled). Run it under torch.no_grad() (evaluation), or "
            "compile for training with backend='hpu_backend' or 'aot_hpu_training_backend'."
        )
    return _inductor(gm, example_inputs)


BACKENDS: dict[str, Callable[..., Any]] = {
    "hpu_backend": hpu_backend,
    "aot_hpu_training_backend": aot_hpu_training_backend,
    "aot_hpu_inference_backend": aot_hpu_inference_backend,
}


def register_backends() -> None:
    """Register the backends with ``torch.compile`` (once; registering again is harmless)."""
    from torch._dynamo import list_backends, register_backend

    known = set(list_backends(exclude_tags=()))
    for name, backend in BACKENDS.items():
        if name not in known:
            register_backend(compiler_fn=backend, name=name)
