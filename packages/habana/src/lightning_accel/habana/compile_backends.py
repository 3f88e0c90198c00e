"""The ``torch.compile`` backends for HPUs: ``hpu_backend``, and the seed guides' ``aot_hpu_*`` names as aliases.

lightning-accel-habana declares the three names in torch's own entry-point group ``torch_dynamo_backends``, so
``torch._dynamo.list_backends()`` lists them right after ``import torch`` and ``torch.compile(model,
backend="hpu_backend")`` works before any Trainer exists. Nothing is imported until a backend is first used.

``hpu_backend`` is never registered twice. The SDK registers it itself, with ``@register_backend``, whenever it loads
(gaudi-pytorch-bridge 1.19.0 ``core/__init__.py:55`` imports ``dynamo/compile_backend/backends.py``, ``:47``), and torch
refuses a second registration of a name (``AssertionError: duplicate name``, which would make the SDK's own import
fail). So the entry point of ``hpu_backend`` registers nothing of ours: when torch looks the name up before the SDK
has loaded (lazy mode, ``PT_HPU_AUTOLOAD=0``, ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), it loads the SDK, whose own
``hpu_backend`` is then the one registered under the name (:func:`__getattr__`). Once the SDK has loaded (eager mode's
default), torch finds the SDK's registration and never reads the entry point.

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
    """The SDK's own ``hpu_backend`` function, loading the SDK (which registers it) if it has not loaded yet."""
    loaded = sys.modules.get(_SDK_BACKENDS)
    if loaded is None:
        sdk.require()
        loaded = importlib.import_module(_SDK_BACKENDS)
    backend: Callable[..., Any] = loaded.hpu_backend
    return backend


def __getattr__(name: str) -> Any:
    """``_sdk_registered_hpu_backend``: what the ``hpu_backend`` entry point hands torch (see the module docstring).

    torch's ``lookup_backend`` loads the entry point and then registers what it got under ``"hpu_backend"``. Loading
    the SDK registers the SDK's function under that name already, so it is taken out of the registry here and handed
    back: torch registers the SDK's own function, once.
    """
    if name != "_sdk_registered_hpu_backend":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from torch._dynamo.backends import registry

    backend = _sdk_hpu_backend()
    if registry._COMPILER_FNS.get("hpu_backend") is backend:
        del registry._COMPILER_FNS["hpu_backend"]
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
