"""Gaudi's device out-of-memory error, recognised wherever Lightning recognises CUDA's.

A full Gaudi does not raise ``torch.OutOfMemoryError``: the SDK's allocator fails with a ``c10::Error``, which Python
sees as a ``RuntimeError`` with the SDK's text (gaudi-pytorch-bridge bcc5172, ``device_memory::pointer`` in
``backend/synapse_helpers/device_memory.cpp``, through ``PT_DEVMEM_FATAL``)::

    [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::268435456 (256)MB

Lightning decides what an out-of-memory error is with ``lightning.pytorch.utilities.memory.is_oom_error``, which knows
CUDA's text ("CUDA" and "out of memory"), cuDNN's and the host allocator's only. So the batch-size finder
(``Tuner.scale_batch_size``, ``BatchSizeFinder``), which halves the batch on an out-of-memory error and re-raises
anything else, and ``garbage_collection_cuda`` would stop at Gaudi's. When a Trainer sets up an HPU, its tree's
``is_oom_error`` (and the binding ``lightning.pytorch.tuner.batch_size_scaling`` imported) also answers ``True`` for
Gaudi's device out-of-memory errors, :func:`is_hpu_out_of_memory`; every other answer is Lightning's. The error
itself is left as the SDK raised it: the same type and text on the emulator as on Gaudi.

Clean-up after one is Lightning's ``garbage_collection_cuda``: ``gc.collect()`` returns the failed step's tensors to
the SDK's memory pool. The SDK has no cache to empty (its ``hpu`` module has no ``empty_cache``: the pool manages the
whole card and takes freed blocks back), and the CUDA half does nothing without CUDA.

Example:
    >>> full = "[Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::64 (6.10352e-05)MB"
    >>> is_hpu_out_of_memory(RuntimeError(full))
    True
    >>> is_hpu_out_of_memory(RuntimeError("shape mismatch"))
    False
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

__all__ = ["HPU_OUT_OF_MEMORY_PATTERNS", "is_hpu_out_of_memory", "recognise_hpu_out_of_memory"]

#: The SDK's device out-of-memory texts (gaudi-pytorch-bridge bcc5172 and 1.19.0): a tensor's memory
#: (``device_memory.cpp``, the default pool), the graph workspace (``device.cpp``, ``get_workspace_buffer``), and the
#: allocator without a pool (``HPUAllocator.cpp``, ``TORCH_HABANA_CHECK``).
HPU_OUT_OF_MEMORY_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::\d+"),
    re.compile(r"FATAL ERROR :: MODULE:PT_SYNHELPER workspace Allocation of size ::\d+ failed!"),
    re.compile(r"synStatus=\d+ \[[^\]]*\] allocate failed to allocate \d+ bytes"),
)

# The Lightning functions that decide what an out-of-memory error is, in each module that binds one (the batch-size
# scaling module imported its own binding). Declared in lightning_accel.core.compat.PRIVATE_NAMES.
_DECIDERS = (("utilities.memory", "is_oom_error"), ("tuner.batch_size_scaling", "is_oom_error"))
_MARK = "__lightning_accel_original__"


def is_hpu_out_of_memory(exception: BaseException) -> bool:
    """Whether ``exception`` is the Gaudi SDK's device out-of-memory error (a ``RuntimeError`` with the SDK's text).

    Example:
        >>> is_hpu_out_of_memory(ValueError("Allocation failed for size::64"))
        False
    """
    if not isinstance(exception, RuntimeError) or len(exception.args) != 1 or not isinstance(exception.args[0], str):
        return False
    text = exception.args[0]
    return any(pattern.search(text) for pattern in HPU_OUT_OF_MEMORY_PATTERNS)


def _tree_of(trainer: object) -> str:
    module = type(trainer).__module__
    return "pytorch_lightning" if module.split(".")[0] == "pytorch_lightning" else "lightning.pytorch"


def _recognising(original: Callable[[BaseException], bool]) -> Callable[[BaseException], bool]:
    def is_oom_error(exception: BaseException) -> bool:
        return bool(original(exception)) or is_hpu_out_of_memory(exception)

    setattr(is_oom_error, _MARK, original)
    is_oom_error.__wrapped__ = original  # type: ignore[attr-defined]
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(is_oom_error, attribute, getattr(original, attribute))
    return is_oom_error


def recognise_hpu_out_of_memory(trainer: Any) -> None:
    """Make the Lightning tree of ``trainer`` take Gaudi's device out-of-memory error for one (idempotent).

    Called by the HPU accelerator's ``setup``, before the batch-size finder runs.
    """
    tree = _tree_of(trainer)
    for module_name, name in _DECIDERS:
        module = importlib.import_module(f"{tree}.{module_name}")
        current = getattr(module, name)
        if getattr(current, _MARK, None) is None:
            setattr(module, name, _recognising(current))
