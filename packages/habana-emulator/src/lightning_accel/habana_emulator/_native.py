"""The device the emulated SDK runs on: the C++ HPU device of :mod:`lightning_accel.emulated_hpu`.

On Gaudi the SDK's Python modules sit on the bridge, a C++ backend on c10's ``DeviceType::HPU`` and
``DispatchKey::HPU``; loading the SDK loads that library and registers ``habana_frameworks.torch.hpu`` as torch's
device module (``core/__init__.py:46`` in gaudi-pytorch-bridge 1.19.0). The emulator does the same with its own C++
device: :func:`install` builds or loads it (cached), tells it which dtypes the SDK narrows in this mode, and registers
the emulated ``hpu`` module as ``torch.hpu``. After that an HPU tensor is a plain ``torch.Tensor`` with the keys
HPU / AutogradHPU / AutocastHPU, and nothing of torch's Python classes has been replaced.

The SDK layers above read the device through the few functions here (memory statistics, the default generator,
zero-copy host views for the host libraries that collectives and graph replays hand HPU memory to).
"""

from __future__ import annotations

import os
import threading
from types import ModuleType
from typing import Any, cast

import torch

from lightning_accel import emulated_hpu
from lightning_accel.core.emulation import EMULATE_BACKEND_VAR, emulation_settings
from lightning_accel.core.errors import ConfigurationError

from . import _device_memory, _generation

__all__ = [
    "INT64_SUPPORT_VAR",
    "adopt",
    "backing_alias",
    "default_generator",
    "device",
    "install",
    "is_installed",
    "memory_stats",
    "refuse_cuda_backing",
    "refuse_other_accelerator",
    "reset_peak_memory_stats",
]

#: The SDK's switch for 64-bit integers in lazy mode (``scripts/env_flags.yaml``; off by default): without it lazy
#: mode computes int64 as int32 on the card.
INT64_SUPPORT_VAR = "PT_ENABLE_INT64_SUPPORT"

_lock = threading.Lock()
_device: ModuleType | None = None


def is_installed() -> bool:
    """Whether :func:`install` has loaded the device in this process."""
    return _device is not None


def device() -> ModuleType:
    """The loaded C++ device module (``memory_stats``, ``default_generator``, ``backing_alias`` ...).

    Raises:
        RuntimeError: When the emulated SDK has not loaded the device yet.
    """
    if _device is None:
        raise RuntimeError(
            "The emulated HPU device is not loaded: import habana_frameworks.torch (with LIGHTNING_ACCEL_EMULATE=hpu) "
            "before using it."
        )
    return _device


def _int64_as_int32(lazy: bool) -> bool:
    raw = os.environ.get(INT64_SUPPORT_VAR, "0").strip().lower()
    if raw not in ("0", "1", "true", "false", ""):
        raise ValueError(
            f"{INT64_SUPPORT_VAR}={os.environ[INT64_SUPPORT_VAR]!r} is not a boolean. Accepted: 1/true (int64 computed "
            "in 64 bits in lazy mode) or 0/false (the SDK's default: int64 computed as int32 in lazy mode)."
        )
    return lazy and raw not in ("1", "true")


def refuse_cuda_backing(backend: str) -> None:
    """Refuse a backing device other than the host, saying why a GPU cannot back the HPU with this torch.

    Raises:
        ConfigurationError: For any ``backend`` but ``"cpu"``.
    """
    if backend == "cpu":
        return
    # Tried on an H200 with torch 2.11+cu130 (forward kernels ran on the GPU): a CUDA backing needs a CUDA build of
    # torch, where CUDA is the process's one accelerator, and autograd through HPU tensors then fails (below).
    raise ConfigurationError(
        f"{EMULATE_BACKEND_VAR}={backend!r}: a GPU cannot back the emulated HPU with torch {torch.__version__}. A CUDA "
        "backing needs a CUDA build of torch, and torch allows one accelerator per process, taken from the build "
        "(at::getAccelerator): CUDA there, so autograd cannot run backward through HPU tensors. Accepted: 'cpu'; "
        f"unset {EMULATE_BACKEND_VAR}."
    )


def _built_accelerator() -> str | None:
    # Read from the build flags: asking torch.accelerator now would make torch cache its HPU hooks before the device
    # registers them.
    if torch.version.hip:
        return "rocm"
    if torch.backends.cuda.is_built():
        return "cuda"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu._is_compiled():
        return "xpu"
    if torch.backends.mps.is_built():
        return "mps"
    return None


def refuse_other_accelerator(accelerator: str | None) -> None:
    """Refuse a torch built with another accelerator, before the HPU device is registered next to it.

    torch (2.13 and earlier) admits one accelerator per process, chosen from the build: ``at::getAccelerator`` raises
    "Cannot have both HPU and cuda" when two are built in, and autograd's engine needs that accelerator's streams for
    every backward through an accelerator's tensors (``engine.cpp``: "opt_ready_stream && opt_parent_stream"). On
    Gaudi the SDK's torch has no other accelerator built in; the emulator needs the same.

    Args:
        accelerator: The accelerator this torch is built with (``"cuda"``, ``"rocm"``, ``"xpu"``, ``"mps"``), or
            ``None`` for a CPU-only build.

    Raises:
        ConfigurationError: When ``accelerator`` is not ``None``.
    """
    if accelerator is None:
        return
    raise ConfigurationError(
        f"The emulated HPU (LIGHTNING_ACCEL_EMULATE=hpu) needs a CPU-only build of torch, and torch "
        f"{torch.__version__} is built with {accelerator!r}: torch allows one accelerator per process, taken from the "
        f"build, so beside {accelerator!r} autograd cannot run backward through HPU tensors (as on Gaudi, where the "
        "SDK's torch has no other accelerator). Install the CPU build: pip install 'torch==<version>' --index-url "
        "https://download.pytorch.org/whl/cpu (or unset LIGHTNING_ACCEL_EMULATE to use the real device)."
    )


def install(hpu_module: ModuleType, lazy: bool) -> None:
    """Load the C++ device (building it on first use) and make ``hpu_module`` torch's device module ``torch.hpu``.

    Later calls do nothing. As on the SDK, float64 is computed with float32 precision in both modes, and int64 as
    int32 in lazy mode unless ``PT_ENABLE_INT64_SUPPORT`` is set. The device gets the memory
    ``LIGHTNING_ACCEL_EMULATE_HPU_MEMORY`` names (the emulated generation's when unset); an allocation past it fails
    with the SDK's device out-of-memory error.

    Args:
        hpu_module: The emulated ``habana_frameworks.torch.hpu``, which becomes ``torch.hpu`` as on Gaudi.
        lazy: Whether the SDK loads in lazy mode (``PT_HPU_LAZY_MODE=1``).

    Raises:
        RuntimeError: When ``torch.hpu`` is already another module (another Gaudi stack in this process).
        ConfigurationError: When ``LIGHTNING_ACCEL_EMULATE_BACKEND`` asks for a backing other than the host, or
            this torch is built with another accelerator (CUDA, ROCm, XPU, MPS), or
            ``LIGHTNING_ACCEL_EMULATE_HPU_MEMORY`` names no device memory size.
        ValueError: When ``PT_ENABLE_INT64_SUPPORT`` is not a boolean.
        lightning_accel.emulated_hpu.DeviceBuildError: When the device cannot be built or loaded here.
    """
    global _device
    with _lock:
        if _device is not None:
            return
        existing = getattr(torch, "hpu", None)
        if getattr(type(existing), "lightning_accel_failed_load", False):
            # The stand-in a failed load at `import torch` left (it raises that load's error): this load replaces it.
            del torch.hpu  # type: ignore[attr-defined]
            existing = None
        if existing is not None and existing is not hpu_module:
            raise RuntimeError(
                f"torch.hpu is already {existing!r}: another Gaudi stack (the real SDK?) is loaded in this process, "
                "so the emulated HPU cannot be installed. Unset LIGHTNING_ACCEL_EMULATE to use the real one."
            )
        refuse_cuda_backing(emulation_settings().backend)
        refuse_other_accelerator(_built_accelerator())
        int64_as_int32 = _int64_as_int32(lazy)
        # Read before the device builds, so that a bad size fails the load at once.
        memory = _device_memory.load_device_memory(_generation.generation())
        loaded = emulated_hpu.load()
        loaded.set_internal_dtypes(float64_as_float32=True, int64_as_int32=int64_as_int32)
        loaded.set_memory_limit(memory)
        if existing is None:
            torch._register_device_module("hpu", hpu_module)
        _register_convolution()
        from . import _sync_batch_norm

        _sync_batch_norm.register()
        _device = loaded


_convolution_library: Any = None


def _register_convolution() -> None:
    # aten::convolution picks a backend by device type and sends every device it does not know (HPU included) to
    # convolution_overrideable, which the device's boxed fallback cannot serve: the host kernel it would run is not
    # that operator. These kernels run the host's convolution on host views of the same memory (no copy) and adopt
    # the fresh results as device memory, as the fallback does for every other operator.
    global _convolution_library
    library = torch.library.Library("aten", "IMPL")
    aten = torch.ops.aten

    def forward(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *geometry: Any) -> torch.Tensor:
        host_bias = None if bias is None else backing_alias(bias)
        out = aten.convolution.default(backing_alias(input), backing_alias(weight), host_bias, *geometry)
        adopted: torch.Tensor = adopt(out.contiguous())
        return adopted

    def backward(
        grad_output: torch.Tensor,
        input: torch.Tensor,
        weight: torch.Tensor,
        stride: Any,
        padding: Any,
        dilation: Any,
        transposed: bool,
        output_padding: Any,
        groups: int,
        output_mask: list[bool],
    ) -> tuple[Any, Any, Any]:
        bias_sizes = [weight.size(1) * groups if transposed else weight.size(0)]
        grads = aten.convolution_backward.default(
            backing_alias(grad_output),
            backing_alias(input),
            backing_alias(weight),
            bias_sizes,
            stride,
            padding,
            dilation,
            transposed,
            output_padding,
            groups,
            output_mask,
        )
        return tuple(adopt(g.contiguous()) if g is not None else None for g in grads)  # type: ignore[return-value]

    library.impl("convolution_overrideable", forward, "HPU")
    library.impl("convolution_backward_overrideable", backward, "HPU")
    _convolution_library = library


def memory_stats() -> dict[str, int]:
    """The device allocator's exact counters (``in_use``, ``peak``, ``num_allocs``, ``num_frees`` ...)."""
    return dict(device().memory_stats())


def reset_peak_memory_stats() -> None:
    """Make the allocator's peak start again from the bytes in use now."""
    device().reset_peak_memory_stats()


def default_generator() -> torch.Generator:
    """The HPU's own default generator (not the host's), a ``torch.Generator`` of device ``hpu:0``."""
    return cast("torch.Generator", device().default_generator())


def backing_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A host tensor viewing exactly the memory of the HPU tensor ``tensor`` (no copy); other tensors unchanged."""
    if tensor.device.type != "hpu":
        return tensor
    alias: torch.Tensor = device().backing_alias(tensor)
    return alias


def adopt(tensor: torch.Tensor) -> Any:
    """An HPU tensor that owns the memory of the fresh host tensor ``tensor`` (no copy), counted as device memory."""
    return device().adopt(tensor)
