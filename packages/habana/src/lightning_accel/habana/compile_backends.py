"""The ``torch.compile`` backends for HPUs: ``hpu_backend``, and the seed guides' ``aot_hpu_*`` names as aliases.

lightning-accel-habana declares the three names in torch's own entry-point group ``torch_dynamo_backends``, so
``torch._dynamo.list_backends()`` lists them right after ``import torch`` and ``torch.compile(model,
backend="hpu_backend")`` works before any Trainer exists. Nothing is imported until a backend is first used; then
the SDK's (or the emulator's) ``habana_frameworks.torch.dynamo.compile_backend`` is loaded and does the compiling.

Current SDKs (1.18 and later) register only ``hpu_backend``; ``aot_hpu_training_backend`` and
``aot_hpu_inference_backend`` were the names of earlier releases, kept here as aliases of ``hpu_backend`` (which
compiles training and inference graphs) with a one-line note when used. The SDK supports ``torch.compile`` in eager
mode (``PT_HPU_LAZY_MODE=0``, the default since 1.21) only.

HPU graphs and ``torch.compile`` cannot be combined (as on Gaudi); doing so raises a ``RuntimeError``.

Example:
    >>> import torch
    >>> compiled = torch.compile(model, backend="hpu_backend")  # doctest: +SKIP
    >>> from lightning_accel.habana import hpu_backend
    >>> compiled = torch.compile(model, backend=hpu_backend)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import sys
import warnings
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
_SDK_BACKENDS = "habana_frameworks.torch.dynamo.compile_backend.backends"


def _sdk_hpu_backend() -> Callable[..., Any]:
    """The SDK's own ``hpu_backend`` function, loading the SDK's compile backend if it has not been loaded."""
    loaded = sys.modules.get(_SDK_BACKENDS)
    if loaded is None:
        sdk.require()
        from torch._dynamo.backends import registry

        # Our entry point may hold the name already (torch registered it on first lookup); the SDK's module registers
        # it again when imported and would fail as a duplicate. Hand the name over to the SDK's own function.
        ours = registry._COMPILER_FNS.pop("hpu_backend", None)
        try:
            loaded = importlib.import_module(_SDK_BACKENDS)
        except BaseException:
            if ours is not None:
                registry._COMPILER_FNS.setdefault("hpu_backend", ours)
            raise
    backend: Callable[..., Any] = loaded.hpu_backend
    return backend


def register_compile_backends() -> None:
    """Load the SDK's compile backend now, so that ``"hpu_backend"`` resolves to the SDK's own function.

    Not needed for ``torch.compile(model, backend="hpu_backend")``, which finds the name through the entry point.

    Raises:
        DeviceUnavailableError: When neither the SDK nor the emulator can be used.
    """
    _sdk_hpu_backend()


def hpu_backend(gm: Any, example_inputs: list[Any], **kwargs: Any) -> Any:
    """The HPU backend for training and inference graphs (``backend="hpu_backend"`` or ``backend=hpu_backend``)."""
    return _sdk_hpu_backend()(gm, example_inputs, **kwargs)


def _alias(name: str) -> Callable[..., Any]:
    def backend(gm: Any, example_inputs: list[Any], **kwargs: Any) -> Any:
        warnings.warn(
            f"backend={name!r} is the name earlier Gaudi SDKs used; current SDKs have 'hpu_backend' only, which "
            "compiles this graph.",
            FutureWarning,
            stacklevel=2,
        )
        return hpu_backend(gm, example_inputs, **kwargs)

    backend.__name__ = backend.__qualname__ = name
    backend.__doc__ = f"``{name}`` of earlier SDKs: an alias of :func:`hpu_backend` (with a one-line note)."
    return backend


aot_hpu_training_backend = _alias("aot_hpu_training_backend")
aot_hpu_inference_backend = _alias("aot_hpu_inference_backend")
