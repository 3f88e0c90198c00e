"""Turning the emulated HPU into the torch device ``"hpu"``, once per process."""

from __future__ import annotations

import threading
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from ._backend import REQUIRED_MODULE_ATTRIBUTES, DeviceGuard, DeviceModule, Hooks
from ._devices import DEVICE_TYPE, backing_of, current_index
from ._generator import register as register_generator
from ._host_data import register as register_host_data
from ._kernels import register_kernels
from ._pinned import register as register_pinned
from ._serialization import register as register_serialization

__all__ = ["install", "is_installed"]

_lock = threading.Lock()
_installed = False


def is_installed() -> bool:
    """Whether :func:`install` has made ``"hpu"`` a torch device in this process."""
    return _installed


def install(backend_module: Any = None) -> None:
    """Make the emulated HPU the torch device ``"hpu"``; later calls do nothing.

    Renames torch's PrivateUse1 backend to ``"hpu"`` and registers the device module, hooks and guard through
    ``torch.utils.backend_registration._setup_privateuseone_for_python_backend``, then the factory kernels. From then
    on ``torch.randn(4, device="hpu")``, ``tensor.to("hpu")``, ``module.to("hpu")`` and ``tensor.hpu()`` work, and
    ``torch.hpu`` is the device module. None of this can be undone in a process.

    Args:
        backend_module: What becomes ``torch.hpu``. ``None`` (default): :class:`~._backend.DeviceModule`, which
            answers torch's calls and hands everything else to the emulated ``habana_frameworks.torch.hpu``. The seam
            may pass the SDK module itself, as the real SDK registers it; it must have every name in
            :data:`~._backend.REQUIRED_MODULE_ATTRIBUTES`.

    Raises:
        RuntimeError: When PrivateUse1 already belongs to another backend, or ``torch.hpu`` is already another module.
        TypeError: When ``backend_module`` lacks one of the names torch calls.
        ConfigurationError: When the CUDA backing is asked for but CUDA is not usable.
    """
    global _installed
    with _lock:
        if _installed:
            return
        module = DeviceModule() if backend_module is None else backend_module
        missing = [name for name in REQUIRED_MODULE_ATTRIBUTES if not hasattr(module, name)]
        if missing:
            raise TypeError(
                f"backend_module={module!r} cannot become torch.hpu: torch calls {', '.join(missing)} on it, which it "
                "lacks. Pass a module with all of "
                f"{', '.join(REQUIRED_MODULE_ATTRIBUTES)}, or None for the emulator's own device module."
            )
        name = torch._C._get_privateuse1_backend_name()
        if name not in ("privateuseone", DEVICE_TYPE):
            raise RuntimeError(
                f"torch's PrivateUse1 backend is already named {name!r} in this process, so the emulated HPU cannot "
                "become the device 'hpu'. Only one out-of-tree backend can be used per process: do not load the "
                f"{name!r} backend together with LIGHTNING_ACCEL_EMULATE=hpu."
            )
        existing = getattr(torch, DEVICE_TYPE, None)
        if existing is not None:
            raise RuntimeError(
                f"torch.hpu is already {existing!r}: another Gaudi stack (the real SDK?) is loaded in this process, "
                "so the emulated HPU cannot be installed. Unset LIGHTNING_ACCEL_EMULATE to use the real one."
            )
        # Fail before touching torch when the backing device is not usable.
        backing_of(current_index())
        if name == DEVICE_TYPE:
            # Someone renamed PrivateUse1 already (renaming twice is an error): do the remaining steps alike.
            torch.utils.generate_methods_for_privateuse1_backend()
            torch._register_device_module(DEVICE_TYPE, module)
            torch._C._acc.register_python_privateuseone_hook(Hooks())
            torch._C._acc.register_python_privateuseone_device_guard(DeviceGuard())
        else:
            _setup_privateuseone_for_python_backend(
                rename=DEVICE_TYPE, backend_module=module, hook=Hooks(), device_guard=DeviceGuard()
            )
        register_kernels()
        register_serialization()
        register_pinned()
        register_generator()
        register_host_data()
        _skip_in_dynamo()
        _backward_on_the_calling_thread()
        _installed = True


def _backward_on_the_calling_thread() -> None:
    """Let the autograd engine run ``"hpu"`` work on the thread that calls ``backward()``, as it does for the CPU.

    The engine hands the backward work of every device that is not the CPU to a worker thread of that device and
    blocks the calling thread until it is done (``Engine::ready_queue`` in torch's ``autograd/engine.cpp``). A real
    HPU's worker thread queues kernels to the card; the emulated device's work is Python that computes on the backing
    device, so the hand-over only adds two thread wake-ups and GIL hand-overs per ``backward()`` (measured on a loaded
    2-core machine: 3.4 ms of wall time for the backward of a small MLP, 0.9 ms without it, see docs/benchmarks.md).
    torch's public switch for this, ``torch.autograd.set_multithreading_enabled(False)``, is
    per thread: it is set for the thread that installs the device (the one that imports torch and the SDK); other
    threads keep torch's default and still work, through the worker thread.
    """
    torch.autograd.set_multithreading_enabled(False)


def _code_objects(module: types.ModuleType) -> Iterator[types.CodeType]:
    """Every code object defined in ``module``: functions, methods, properties and the closures nested in them."""
    pending: list[Any] = []
    for value in vars(module).values():
        if getattr(value, "__module__", None) != module.__name__:
            continue
        pending.append(value)
        if isinstance(value, type):
            pending.extend(vars(value).values())
    seen: set[int] = set()
    while pending:
        value = pending.pop()
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            pending.extend(f for f in (value.fget, value.fset, value.fdel) if f is not None)
            continue
        code = getattr(value, "__code__", value)
        if not isinstance(code, types.CodeType) or id(code) in seen:
            continue
        seen.add(id(code))
        yield code
        pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))


def _skip_in_dynamo() -> None:
    """Tell dynamo never to compile the device layer's own frames.

    ``__torch_dispatch__`` and the plans run whenever an ``"hpu"`` operation runs, also eagerly inside a region that
    ``torch.compile`` is watching (code around a graph break): dynamo would then try to compile them as user code
    (failing on a wrapper whose ``_elem`` is not set yet). What dynamo traces of an ``"hpu"`` tensor is the ATen
    operation itself; the device layer runs under fake tensors for it. This is ``torch._dynamo.eval_frame.skip_code``
    for every code object of these modules, through the C entry point so that importing dynamo (seconds) is not paid
    by processes that never compile.
    """
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

    from . import _accounting, _backend, _devices, _dispatch, _kernels, _tensor

    strategy = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.DEFAULT)
    for module in (_tensor, _dispatch, _kernels, _accounting, _backend, _devices):
        for code in _code_objects(module):
            set_code_exec_strategy(code, strategy)
