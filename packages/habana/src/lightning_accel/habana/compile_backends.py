"""The ``torch.compile`` backends for HPUs.

They are ``hpu_backend``, ``aot_hpu_training_backend`` and ``aot_hpu_inference_backend``.

The SDK registers these names with ``torch.compile`` when it is loaded, so ``torch.compile(model,
backend="hpu_backend")`` works once any HPU code has run (``Trainer(accelerator="hpu")``, ``HPUAccelerator()``,
``from lightning_accel.habana.sdk import htcore``) or after :func:`register_compile_backends`. Importing
``lightning_accel.habana`` alone registers nothing. The functions below can also be passed as ``backend=``
directly; they load the SDK (or its emulator) and hand the graph to the backend of the same name.

HPU graphs and ``torch.compile`` cannot be combined (as on Gaudi); doing so raises a ``RuntimeError``.

Example:
    >>> import torch
    >>> from lightning_accel.habana import hpu_backend
    >>> compiled = torch.compile(model, backend=hpu_backend)  # doctest: +SKIP
    >>> compiled = torch.compile(model, backend="hpu_backend")  # doctest: +SKIP  (after the SDK is loaded)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import sdk

__all__ = [
    "BACKEND_NAMES",
    "aot_hpu_inference_backend",
    "aot_hpu_training_backend",
    "hpu_backend",
    "register_compile_backends",
]

BACKEND_NAMES = ("hpu_backend", "aot_hpu_training_backend", "aot_hpu_inference_backend")


def register_compile_backends() -> None:
    """Load the SDK (or its emulator), which registers the backend names with ``torch.compile``.

    Raises:
        DeviceUnavailableError: When neither the SDK nor the emulator can be used.
    """
    sdk.ht_module()


def _delegate(name: str, doc: str) -> Callable[..., Any]:
    def backend(gm: Any, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
        from torch._dynamo import lookup_backend

        register_compile_backends()
        return lookup_backend(name)(gm, example_inputs, **kwargs)

    backend.__name__ = backend.__qualname__ = name
    backend.__doc__ = doc
    return backend


hpu_backend = _delegate("hpu_backend", "The HPU backend for training and inference (``backend=hpu_backend``).")
aot_hpu_training_backend = _delegate(
    "aot_hpu_training_backend", "The AOT-autograd training backend of earlier SDKs (``backend=...``)."
)
aot_hpu_inference_backend = _delegate(
    "aot_hpu_inference_backend", "The inference backend: forward graphs only; refuses graphs that need gradients."
)
